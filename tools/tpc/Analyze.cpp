// tpc analyze's options and output (lib/Driver/Analyze.cpp runs it, lib/Analysis/Analyze.cpp
// does the analysis).
#include "Commands.h"

#include "tpc/Driver/Analyze.h"
#include "tpc/Target/TargetInfo.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace tpc {

using namespace driver;

namespace {

struct AnalyzeCommand : AnalyzeArgs {
  bool json = false;
};

} // namespace

void addAnalyzeCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<AnalyzeCommand>();
  CLI::App *cmd = app.add_subcommand(
      "analyze", "Collectives per layer for a prefill and a decode step, against transformers' "
                 "count, and memory per rank");
  addPlanArgs(cmd, *opts);
  cmd->add_flag("--sequence-parallel", opts->analysis.sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  CLI::Option *prefillLenOption = cmd->add_option(
      "--prefill-len", opts->analysis.prefillLen,
      "prompt tokens of the prefill (default 128, or the whole --max-model-len where shorter)");
  CLI::Option *maxSeqLenOption = cmd->add_option(
      "--max-model-len", opts->analysis.maxSeqLen,
      "tokens the KV cache holds (default 2048, or the model's max_position_embeddings where "
      "fewer, as the binary's)");
  CLI::Option *stepTokens = cmd->add_option(
      "--step-tokens", opts->analysis.stepTokens,
      "also report a step of the engine's of this many tokens (of --step-seqs sequences)");
  cmd->add_option("--step-seqs", opts->analysis.stepSequences,
                  "the sequences of --step-tokens' step, each sampled (default 1)")
      ->needs(stepTokens);
  cmd->add_option("--cached-prefix", opts->analysis.cachedPrefix,
                  "also report the prefill after a prefix-cache hit of this many of its tokens "
                  "(the whole KV blocks of them before its last token), and what the hit saves")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--target", opts->analysis.target,
                  "the target whose binary is reported: its decisions lay out the activation "
                  "arena, its element type sizes it (cpu: fp32, cuda: bf16)")
      ->check(CLI::IsMember(target::targetNames()));
  addWeightsDtype(cmd, opts->analysis.weights);
  cmd->add_option("--kv-cache-dtype", opts->analysis.kvCacheDtype,
                  "the KV cache's element type, as the binary's --kv-cache-dtype: f32 (the "
                  "CPU's default), bf16 or f16 (half the bytes), q8_0 (34 bytes a block of "
                  "32); the GPU's is bf16")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0"}));
  cmd->add_flag("--sampled", opts->analysis.sampled,
                "report steps that sample (or want logprobs, penalties or dumped logits): "
                "lm_head's gather carries the logits, where a greedy step (the default) "
                "gathers each rank's argmax alone");
  CLI::Option *hosts = cmd->add_option(
      "--hosts", opts->analysis.hosts,
      "predict each collective's time with the ranks spread over this many machines, and a "
      "decode step at every host count that divides tp (docs/multi-host.md)");
  cmd->add_option("--link-gbps", opts->analysis.linkGbps,
                  "the link between the hosts, Gbit/s each way (default 10)")
      ->needs(hosts);
  cmd->add_option("--link-latency-us", opts->analysis.linkLatencyUs,
                  "a message's one-way time on it, microseconds (default 50)")
      ->needs(hosts);
  cmd->add_option("--host-mem-gbs", opts->analysis.hostMemGBs,
                  "each host's memory bandwidth, GB/s, which its ranks' decode reads share "
                  "(default 27: this project's machine)")
      ->needs(hosts);
  cmd->add_option("--core-gbs", opts->analysis.coreGBs,
                  "what one rank's core reads alone, GB/s, for the predicted steps (default 18: "
                  "this project's machine)");
  cmd->add_option("--core-gflops", opts->analysis.coreGflops,
                  "one rank's core's multiply-add rate, GFLOP/s (default 57: this project's "
                  "machine)");
  cmd->add_option("--concurrency", opts->analysis.concurrency,
                  "with --pp: steps in flight through the stages, for the pipeline's bubble "
                  "(default 1, as this engine runs them)");
  cmd->add_flag("--no-fold", opts->analysis.noFold,
                "report the program compiled with --no-fold (tp-fold-redistribute left out)");
  cmd->add_flag("--json", opts->json, "print the report as JSON");
  cmd->add_option("--dot", opts->dot,
                  "write the lowered prefill graph as Graphviz DOT to this file (and an .svg "
                  "beside it when `dot` is installed)");
  cmd->callback([opts, maxSeqLenOption, prefillLenOption, &run] {
    opts->analysis.maxSeqLenGiven = maxSeqLenOption->count() > 0;
    opts->analysis.prefillLenGiven = prefillLenOption->count() > 0;
    run = [opts]() -> int {
      const AnalyzeCommand &o = *opts;
      if (!o.analysis.kvCacheDtype.empty() && o.analysis.target != "cpu") {
        reportError("tpc analyze: --kv-cache-dtype is the CPU target's; the " +
                    o.analysis.target + " target keeps its KV cache in its activation type");
        return 1;
      }
      Session session;
      FailureOr<analysis::Analysis> report = analyzeModel(session, o);
      if (failed(report))
        return 1;
      (o.json ? analysis::printJson : analysis::printText)(*report, llvm::outs());
      return session.errors() ? 1 : 0;
    };
  });
}

} // namespace tpc
