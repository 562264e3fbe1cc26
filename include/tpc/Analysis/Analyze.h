// tpc analyze as a library: what the binary compiled from a model, a plan and a target
// will do (its collectives per layer for a prefill and a decode step, priced as the runtime
// runs them, against transformers' count for the same plan; its memory per rank; what tp
// splits unevenly), read from the same program compile builds, so what it reports is what
// the binary does.
#ifndef TPC_ANALYSIS_ANALYZE_H
#define TPC_ANALYSIS_ANALYZE_H

#include "tpc/Analysis/Report.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace tpc::analysis {

struct AnalyzeOptions {
  std::string model, plan, strategies; // the model's path is for the report's heading
  int64_t tp = 0;
  int64_t pp = 1;               // pipeline stages
  std::vector<int64_t> ppSplit; // decoder layers per stage (empty: balanced)
  std::string target = "cpu";
  int64_t prefillLen = 128, maxSeqLen = 2048; // the binary's default (checked in Analyze.cpp)
  bool maxSeqLenGiven = false, prefillLenGiven = false; // else the binary's defaults apply
  /// A step of the engine's besides: stepTokens tokens of stepSequences sequences, each
  /// sampled (0: none).
  int64_t stepTokens = 0, stepSequences = 0;
  bool sequenceParallel = false, noFold = false;
  /// The steps sample, or read whole rows of logits otherwise (penalties, logprobs, dumped
  /// logits): the binary gathers the logits even where tp-greedy-argmax let a greedy step
  /// gather each row's argmax alone. False: greedy, the binary's default.
  bool sampled = false;
  std::string weights = "stored"; // --weights-dtype
  /// --hosts: the ranks spread over this many machines (0: not asked), the link between
  /// them, and each host's memory bandwidth (what its ranks' decode reads share).
  int64_t hosts = 0;
  double linkGbps = 10, linkLatencyUs = 50, hostMemGBs = 20;
  /// Steps in flight through the pipeline stages, for its bubble (--pp > 1).
  int64_t concurrency = 1;
};

/// A decode step on `hosts` machines (tpc analyze --hosts): its ranks' weight reads, which
/// the ranks of one host share its memory bandwidth for, and its collectives on the link.
struct HostsRow {
  int64_t hosts = 0, ranksPerHost = 0;
  double computeMicros = 0, commMicros = 0;
};

/// One pipeline stage of a mesh (--pp > 1): tp ranks running consecutive decoder layers.
struct StageReport {
  int64_t stage = 0, firstLayer = 0, lastLayer = 0;
  std::vector<int64_t> ranks; // world ranks, stage-major
  /// As Analysis::phases (no transformers' count): what one of its ranks runs, the
  /// collectives of its tp group and the sends and receives of its transfers.
  std::vector<PhaseReport> phases;
  MemoryReport memory; // what each of its ranks holds
  RankShares shares;   // by tp rank
  /// A decode step's predicted microseconds on its ranks: their weight and KV reads at the
  /// prefill's context, their collectives, and their sends to other stages.
  double readMicros = 0, collectiveMicros = 0, sendMicros = 0;
  /// The hosts its ranks are on (the one without --hosts), and whether its sends leave one.
  std::vector<int64_t> hosts;
  bool sendsAcrossHosts = false;
};

/// The stages' decode steps as a pipeline with --concurrency steps in flight: one step's
/// latency through every stage and its sends, the cycle in which each stage does one step,
/// each stage's busy share of it, and the share of the mesh left idle.
struct PipelineReport {
  /// Steps the runtime keeps in flight at --concurrency (a sequence is in one at a time; at
  /// most one a stage; one where the target's runtime does not pipeline).
  int64_t inFlight = 1;
  double stepMicros = 0, cycleMicros = 0, bubble = 0;
  std::vector<double> busy;
};

struct Analysis {
  AnalyzeOptions options;
  /// The prefill, a decode step, then --step-tokens' step; with pipeline stages, every
  /// stage's collectives and each transfer's send.
  std::vector<PhaseReport> phases;
  /// What a rank holds; with pipeline stages, those of the stage that holds the most, and
  /// `shares` by world rank.
  MemoryReport memory;
  RankShares shares;
  std::vector<StageReport> stages; // with pipeline stages (--pp > 1) only
  int64_t fullestStage = 0;         // the stage `memory` is of
  PipelineReport pipeline;
  std::vector<std::string> notes;
  std::string maxSeqLenFrom, maxSeqLenWhy; // where the KV cache's length came from
  int64_t positions = 0;                   // the model's max_position_embeddings; 0: unknown
  /// With --hosts: each phase's collectives' predicted microseconds (as `phases`), and
  /// (without pipeline stages) a decode step at each host count that divides tp.
  std::vector<std::vector<double>> predictedMicros;
  std::vector<HostsRow> hostsRows;
  mlir::OwningOpRef<mlir::ModuleOp> prefill; // the prefill's graph, collectives explicit (--dot)
};

/// Applies the plan to `module` and analyzes what the binary for `options` does. A usage
/// problem (--prefill-len past --max-model-len) fails with `error` set; a plan or pass that
/// fails reports its diagnostics and fails with `error` empty.
mlir::FailureOr<Analysis> analyze(mlir::ModuleOp module, const AnalyzeOptions &options,
                                  std::string &error);

/// The report as tpc analyze prints it, and as --json does.
void printText(const Analysis &analysis, llvm::raw_ostream &os);
void printJson(const Analysis &analysis, llvm::raw_ostream &os);

} // namespace tpc::analysis

#endif // TPC_ANALYSIS_ANALYZE_H
