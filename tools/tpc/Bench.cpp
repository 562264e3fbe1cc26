// tpc bench's options and table (lib/Driver/Bench.cpp runs the requests): for each
// concurrency, output tokens per second, time to first token and time per output token
// (median and p99 of the requests'), and the throughput against concurrency 1.
#include "Commands.h"

#include "tpc/Driver/Bench.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

namespace {

int bench(const BenchOptions &o) {
  BenchReport report;
  if (int status = runBench(o, report))
    return status;
  std::string mesh = (o.pp > 1 ? fmt::format("pp {} x ", o.pp) : "") + fmt::format("tp {}", o.tp);
  llvm::outs() << fmt::format("tpc bench {}: {}, {} requests of {} prompt tokens and {} new "
                              "tokens each, all arriving at the start\n",
                              o.checkpoint, mesh, report.requests, o.promptLen, o.outputLen);
  llvm::outs() << fmt::format("{:>11} {:>13} {:>8} {:>11} {:>11} {:>11} {:>11}\n", "concurrency",
                              "output tok/s", "vs c1", "TTFT p50", "TTFT p99", "TPOT p50",
                              "TPOT p99");
  double first = 0;
  for (const BenchResult &r : report.results) {
    double rate = r.tokensPerSecond();
    if (r.concurrency == 1)
      first = rate;
    llvm::outs() << fmt::format(
        "{:>11} {:>13.1f} {:>8} {:>9.1f}ms {:>9.1f}ms {:>9.2f}ms {:>9.2f}ms\n", r.concurrency,
        rate, first > 0 ? fmt::format("{:.2f}x", rate / first) : std::string("-"),
        quantile(r.ttft, 0.5), quantile(r.ttft, 0.99), quantile(r.tpot, 0.5),
        quantile(r.tpot, 0.99));
  }
  return 0;
}

} // namespace

void addBenchCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "bench", "Offline throughput of a checkpoint through the engine at several "
               "concurrencies: output tokens/s, time to first token, time per output token");
  cmd->add_option("checkpoint", opts->checkpoint,
                  "the checkpoint: a directory (config.json, *.safetensors) or a .gguf file")
      ->required();
  cmd->add_option("--tp", opts->tp, "tensor-parallel size: ranks sharing each layer (default 1)");
  cmd->add_option("--pp", opts->pp,
                  "pipeline stages, each of --tp ranks: pp x tp local ranks (default 1)");
  cmd->add_option("--pp-split", opts->ppSplit,
                  "decoder layers per stage, N0,N1,... (default: balanced by the cost model)")
      ->delimiter(',');
  cmd->add_option("--plan", opts->plan,
                  "a tp_plan JSON file, or auto for transformers' own plan (default)");
  addWeightsDtype(cmd, opts->weights);
  cmd->add_option("--concurrency", opts->concurrency,
                  "the sequences in one step to measure, comma-separated (default 1,8); "
                  "each runs the same requests with --max-num-seqs set to it");
  cmd->add_option("--prompt-len", opts->promptLen,
                  "prompt tokens of each request, random ids (default 32)");
  cmd->add_option("--output-len", opts->outputLen,
                  "new tokens of each request, end-of-sequence ignored (default 128)");
  cmd->add_option("--num-prompts", opts->numPrompts,
                  "how many requests (default: twice the largest concurrency)");
  cmd->add_option("--seed", opts->seed, "the seed the prompts are drawn from (default 0)");
  cmd->add_flag("--no-cache", opts->noCache,
                "compile into a temporary directory instead of the cache");
  cmd->callback([opts, &runner] { runner = [opts] { return bench(*opts); }; });
}

} // namespace tpc
