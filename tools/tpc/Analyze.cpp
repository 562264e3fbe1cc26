// tpc analyze's options and output (lib/Analysis/Analyze.cpp does the analysis).
#include "Commands.h"

#include "tpc/Analysis/Analyze.h"
#include "tpc/Driver/Session.h"
#include "tpc/Target/TargetInfo.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

using namespace mlir;

namespace tpc {

using namespace driver;

namespace {

struct AnalyzeArgs : PlanArgs {
  std::string dot;
  bool json = false;
  analysis::AnalyzeOptions analysis;
};

} // namespace

void addAnalyzeCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<AnalyzeArgs>();
  CLI::App *cmd = app.add_subcommand(
      "analyze", "Collectives per layer for a prefill and a decode step, against transformers' "
                 "count, and memory per rank");
  addPlanArgs(cmd, *opts);
  cmd->add_flag("--sequence-parallel", opts->analysis.sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  CLI::Option *prefillLenOption = cmd->add_option(
      "--prefill-len", opts->analysis.prefillLen,
      "prompt tokens of the prefill (default 128, or the whole --max-seq-len where shorter)");
  CLI::Option *maxSeqLenOption = cmd->add_option(
      "--max-seq-len", opts->analysis.maxSeqLen,
      "tokens the KV cache holds (default 2048, or the model's max_position_embeddings where "
      "fewer, as the binary's)");
  CLI::Option *stepTokens = cmd->add_option(
      "--step-tokens", opts->analysis.stepTokens,
      "also report a step of the engine's of this many tokens (of --step-seqs sequences)");
  cmd->add_option("--step-seqs", opts->analysis.stepSequences,
                  "the sequences of --step-tokens' step, each sampled (default 1)")
      ->needs(stepTokens);
  cmd->add_option("--target", opts->analysis.target,
                  "the target whose binary is reported: its decisions lay out the activation "
                  "arena, its element type sizes it (cpu: fp32, cuda: bf16)")
      ->check(CLI::IsMember(target::targetNames()));
  addWeightsDtype(cmd, opts->analysis.weights);
  cmd->add_flag("--sampled", opts->analysis.sampled,
                "report steps that sample (or want logprobs, penalties or dumped logits): "
                "lm_head's gather carries the logits, where a greedy step (the default) "
                "gathers each rank's argmax alone");
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
      const AnalyzeArgs &o = *opts;
      if (!checkTpArg(o))
        return 1;
      if (o.analysis.prefillLen < 1 || o.analysis.maxSeqLen < 1) {
        reportError("--prefill-len and --max-seq-len must be at least 1");
        return 1;
      }
      analysis::AnalyzeOptions options = o.analysis;
      if (options.stepTokens > 0 && options.stepSequences == 0)
        options.stepSequences = 1;
      if (options.stepTokens < 0 ||
          (options.stepTokens > 0 &&
           (options.stepSequences < 1 || options.stepSequences > options.stepTokens))) {
        reportError(fmt::format("--step-tokens {} of --step-seqs {}: a step has at least one "
                                "token for each of its sequences, and at least one sequence",
                                options.stepTokens, options.stepSequences));
        return 1;
      }
      Session session;
      OwningOpRef<ModuleOp> module = session.loadModel(o.model);
      if (!module)
        return 1;
      options.model = o.model;
      options.plan = o.plan;
      options.strategies = o.strategies;
      options.tp = o.tp;
      std::string error;
      FailureOr<analysis::Analysis> report = analysis::analyze(*module, options, error);
      if (failed(report)) {
        if (!error.empty())
          reportError(error);
        return 1;
      }
      if (!o.dot.empty()) {
        std::string graph;
        llvm::raw_string_ostream os(graph);
        writeDot(*report->prefill, os);
        if (!writeAtomically(o.dot, graph))
          return 1;
        if (auto dot = llvm::sys::findProgramByName("dot")) {
          std::string svg = o.dot + ".svg";
          llvm::StringRef args[] = {*dot, "-Tsvg", o.dot, "-o", svg};
          if (llvm::sys::ExecuteAndWait(*dot, args) != 0)
            reportError("dot could not render " + o.dot);
        }
      }
      (o.json ? analysis::printJson : analysis::printText)(*report, llvm::outs());
      return session.errors() ? 1 : 0;
    };
  });
}

} // namespace tpc
