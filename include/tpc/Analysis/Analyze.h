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
  /// --cached-prefix: the prefill's first tokens found in the prefix cache (0: none); the
  /// whole KV blocks of them before the prompt's last token are not computed.
  int64_t cachedPrefix = 0;
  bool sequenceParallel = false, noFold = false;
  /// The steps sample, or read whole rows of logits otherwise (penalties, logprobs, dumped
  /// logits): the binary gathers the logits even where tp-greedy-argmax let a greedy step
  /// gather each row's argmax alone. False: greedy, the binary's default.
  bool sampled = false;
  std::string weights = "stored"; // --weights-dtype
  /// --kv-cache-dtype: the binary's KV cache element type, f32 or bf16 (the CPU target's
  /// choice); empty: the target's own (the activations' type).
  std::string kvCacheDtype;
  /// --hosts: the ranks spread over this many machines (0: not asked), the link between
  /// them, and each host's memory bandwidth (what its ranks' decode reads share).
  int64_t hosts = 0;
  double linkGbps = 10, linkLatencyUs = 50, hostMemGBs = 27;
  /// What one rank's core does alone (each rank is one process of one thread): the bytes a
  /// second it reads from memory, and its multiply-adds' rate (GFLOP/s). A rank reads at this
  /// rate or at its share of its host's bus (hostMemGBs), whichever is lower. The defaults
  /// are this project's 2-core machine's, fitted to tpc's own measured decode steps
  /// (docs/plans.md, "Choosing a mesh").
  double coreGBs = 18, coreGflops = 57;
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
  /// prefill's context, their multiply-adds, their collectives, and their sends to other
  /// stages (predictMesh's model).
  double readMicros = 0, multiplyAddMicros = 0, collectiveMicros = 0, sendMicros = 0;
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

/// One step of a stage's ranks, predicted by its parts (microseconds): its weight and KV
/// reads, its multiply-adds, its tp group's collectives and its sends to the next stage.
struct StepTime {
  double reads = 0, multiplyAdds = 0, collectives = 0, sends = 0;
  double total() const { return reads + multiplyAdds + collectives + sends; }
};

/// What a mesh is predicted to do, from an Analysis made with the step that
/// sequencesPerStep(options) says (stepTokens = stepSequences = it): what tpc suggest ranks.
struct MeshPrediction {
  /// The fullest rank's weights and activation arena, and the KV cache of --concurrency
  /// sequences of --max-model-len tokens (what --max-num-seqs C allocates by default).
  double memoryPerRank = 0;
  /// A --prefill-len prompt, and a decode step of one sequence right after it, through every
  /// stage in turn (the stages' times and their sends added).
  double prefillMicros = 0, decodeMicros = 0;
  /// At --concurrency C: the sequences of a step and the steps in flight (as the engine
  /// schedules them), the time in which every sequence gets a token, and the output tokens a
  /// second that makes.
  int64_t stepSequences = 1, inFlight = 1;
  double roundMicros = 0, tokensPerSecond = 0;
  /// The stage whose step at C takes longest, and that step by its parts.
  int64_t slowestStage = 0;
  StepTime slowest;
};

/// The sequences of one decode step at `options`' concurrency: all of them, or with pipeline
/// stages on a target whose runtime keeps a step in each, ceil(C / P); at most what the
/// target's runtime runs in a step (TargetInfo::stepSequences).
int64_t sequencesPerStep(const AnalyzeOptions &options);

/// `analysis` priced as the runtime runs it on `options`' machines. A rank's reads go at
/// min(coreGBs, hostMemGBs / the ranks of its stage on its host); its multiply-adds at
/// coreGflops, two flops for each weight element a token meets; its collectives and sends as
/// CostModel.h prices them. A round gives every sequence a token: its steps go through the
/// stages as many at a time as are in flight, and every stage does each of them, so it is as
/// long as those trips one after another, or the slowest stage's steps, whichever is longer;
/// with steps in flight the other stages' ranks on a host read while a stage's do. Not
/// modelled: attention's own arithmetic (its reads of the KV cache are), the scheduler.
MeshPrediction predictMesh(const Analysis &analysis);

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
