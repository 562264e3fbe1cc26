// tpc analyze's driver (include/tpc/Driver/Analyze.h); the analysis itself is
// lib/Analysis/Analyze.cpp.
#include "tpc/Driver/Analyze.h"

#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <cmath>

namespace tpc::driver {

namespace {

/// `args` checked into the analysis' options: a step of --step-tokens is of one sequence
/// unless --step-seqs says otherwise. None, with a usage error reported, when they do not
/// make a run the binary could do.
std::optional<analysis::AnalyzeOptions> analyzeOptions(const AnalyzeArgs &args) {
  if (!checkTpArg(args))
    return std::nullopt;
  if (args.analysis.prefillLen < 1 || args.analysis.maxSeqLen < 1) {
    reportError("--prefill-len and --max-model-len must be at least 1");
    return std::nullopt;
  }
  analysis::AnalyzeOptions options = args.analysis;
  if (options.stepTokens > 0 && options.stepSequences == 0)
    options.stepSequences = 1;
  if (options.stepTokens < 0 ||
      (options.stepTokens > 0 &&
       (options.stepSequences < 1 || options.stepSequences > options.stepTokens))) {
    reportError(fmt::format("--step-tokens {} of --step-seqs {}: a step has at least one "
                            "token for each of its sequences, and at least one sequence",
                            options.stepTokens, options.stepSequences));
    return std::nullopt;
  }
  if (options.hosts < 0 || (args.tp > 0 && options.hosts > args.tp * args.pp)) {
    reportError(args.pp > 1 ? fmt::format("--hosts must be from 1 to the ranks (pp {} x tp {} "
                                          "= {}), got {}",
                                          args.pp, args.tp, args.pp * args.tp, options.hosts)
                            : fmt::format("--hosts must be from 1 to the tp ({}), got {}",
                                          args.tp, options.hosts));
    return std::nullopt;
  }
  if (options.concurrency < 1) {
    reportError(fmt::format("--concurrency must be at least 1, got {}", options.concurrency));
    return std::nullopt;
  }
  if (!(options.linkGbps > 0) || !(options.linkLatencyUs >= 0) || !(options.hostMemGBs > 0) ||
      !std::isfinite(options.linkGbps) || !std::isfinite(options.linkLatencyUs) ||
      !std::isfinite(options.hostMemGBs)) {
    reportError("--link-gbps and --host-mem-gbs must be positive, and --link-latency-us at "
                "least 0");
    return std::nullopt;
  }
  if (!(options.coreGBs > 0) || !(options.coreGflops > 0) || !std::isfinite(options.coreGBs) ||
      !std::isfinite(options.coreGflops)) {
    reportError("--core-gbs and --core-gflops must be positive");
    return std::nullopt;
  }
  options.model = args.model;
  options.plan = args.plan;
  options.strategies = args.strategies;
  options.tp = args.tp;
  options.pp = args.pp;
  options.ppSplit = args.ppSplit;
  return options;
}

/// The prefill's graph as DOT into `path`, and an .svg beside it where `dot` is installed
/// (one it cannot draw is reported, not a failure: the DOT is what was asked for).
bool writeDotFile(const analysis::Analysis &report, const std::string &path) {
  std::string graph;
  llvm::raw_string_ostream os(graph);
  writeDot(*report.prefill, os);
  if (!writeAtomically(path, graph))
    return false;
  if (auto dot = llvm::sys::findProgramByName("dot")) {
    std::string svg = path + ".svg";
    llvm::StringRef args[] = {*dot, "-Tsvg", path, "-o", svg};
    if (llvm::sys::ExecuteAndWait(*dot, args) != 0)
      reportError("dot could not render " + path);
  }
  return true;
}

} // namespace

mlir::FailureOr<analysis::Analysis> analyzeModel(Session &session, const AnalyzeArgs &args) {
  std::optional<analysis::AnalyzeOptions> options = analyzeOptions(args);
  if (!options)
    return mlir::failure();
  mlir::OwningOpRef<mlir::ModuleOp> module = session.loadModel(args.model);
  if (!module)
    return mlir::failure();
  std::string error;
  mlir::FailureOr<analysis::Analysis> report = analysis::analyze(*module, *options, error);
  if (mlir::failed(report)) {
    if (!error.empty())
      reportError(error);
    return mlir::failure();
  }
  if (!args.dot.empty() && !writeDotFile(*report, args.dot))
    return mlir::failure();
  return report;
}

} // namespace tpc::driver
