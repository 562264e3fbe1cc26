// tpc suggest's options (lib/Driver/Suggest.cpp ranks the meshes and prints them).
#include "Commands.h"

#include "tpc/Driver/Suggest.h"
#include "tpc/Target/TargetInfo.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

namespace {

struct SuggestCommand : SuggestArgs {
  bool json = false;
};

} // namespace

void addSuggestCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<SuggestCommand>();
  analysis::AnalyzeOptions &m = opts->machine;
  CLI::App *cmd = app.add_subcommand(
      "suggest", "The meshes (pp x tp) and plans a model runs on with some ranks, each "
                 "compiled and checked, best first by predicted decode time or throughput");
  cmd->add_option("model", opts->model,
                  "a model file (tp dialect, as tpc analyze takes it) or a checkpoint (a "
                  "directory, its config.json, or a .gguf file, as tpc run takes it)")
      ->required();
  cmd->add_option("--ranks", opts->ranks,
                  "the ranks there are (processes, one core or GPU each); meshes of this many "
                  "or of a divisor of it are ranked")
      ->required();
  cmd->add_option("--plan", opts->plan,
                  "only this plan (a plan.json, or auto / auto-ep); default: auto, and auto-ep "
                  "too for a model with experts");
  cmd->add_option("--strategies", opts->strategies, "a JSON file of custom strategies");
  cmd->add_option("--hosts", m.hosts,
                  "the machines the ranks are on, the same number on each (default 1)");
  cmd->add_option("--link-gbps", m.linkGbps,
                  "the link between the hosts, Gbit/s each way (default 10)");
  cmd->add_option("--link-latency-us", m.linkLatencyUs,
                  "a message's one-way time on it, microseconds (default 50)");
  cmd->add_option("--host-mem-gbs", m.hostMemGBs,
                  "each host's memory bandwidth, GB/s, which its ranks' reads share (default 27)");
  cmd->add_option("--core-gbs", m.coreGBs,
                  "what one rank's core reads alone, GB/s (default 18: this project's machine)");
  cmd->add_option("--core-gflops", m.coreGflops,
                  "one rank's core's multiply-add rate, GFLOP/s (default 57: this project's "
                  "machine)");
  cmd->add_option("--memory-per-rank", opts->memoryPerRank,
                  "the memory a rank may hold (weights, KV cache, activations), as 16GiB or "
                  "512MB; meshes that need more are not ranked");
  cmd->add_option("--concurrency", m.concurrency,
                  "sequences decoding at once: rank by output tokens a second at it where above "
                  "1, else by a decode step's time (default 1)");
  CLI::Option *prefillLen = cmd->add_option(
      "--prefill-len", m.prefillLen,
      "prompt tokens of the prefill (default 128, or the whole --max-model-len where shorter)");
  CLI::Option *maxSeqLen = cmd->add_option(
      "--max-model-len", m.maxSeqLen,
      "tokens the KV cache holds (default 2048, or the model's max_position_embeddings where "
      "fewer)");
  cmd->add_option("--target", m.target, "the target the meshes are compiled for (default cpu)")
      ->check(CLI::IsMember(target::targetNames()));
  addWeightsDtype(cmd, m.weights);
  cmd->add_flag("--json", opts->json, "print the ranking as JSON");
  cmd->callback([opts, maxSeqLen, prefillLen, &run] {
    opts->machine.maxSeqLenGiven = maxSeqLen->count() > 0;
    opts->machine.prefillLenGiven = prefillLen->count() > 0;
    run = [opts]() -> int {
      std::optional<Suggestion> s = suggest(*opts);
      if (!s)
        return 1;
      (opts->json ? printJson : printText)(*s, llvm::outs());
      if (!s->ranked.empty())
        return 0;
      reportError(fmt::format("tpc suggest: no mesh of {} ranks or a divisor of it compiles and "
                              "fits; each one's reason is listed under not ranked",
                              opts->ranks));
      return 1;
    };
  });
}

} // namespace tpc
