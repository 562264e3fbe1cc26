// The pipeline as tpc runs it in-process (docs/architecture.md); tpc-opt runs the same
// passes one by one.
#ifndef TPC_TRANSFORMS_PIPELINE_H
#define TPC_TRANSFORMS_PIPELINE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace tpc {

struct ShardingOptions {
  std::string planPath;
  std::string strategiesPath;
  int64_t tpSize = 1;
  std::string sequenceParallel = "auto"; // auto, on or off
};

/// tp-last-token, tp-propagate-layouts, tp-insert-redistribute, tp-fold-redistribute and
/// tp-lower-redistribute, on a module the plan has been applied to: the graph with every
/// collective explicit, shapes still global.
/// `fold` false leaves out tp-fold-redistribute (to see or run what folding removes).
void buildCollectivesPipeline(mlir::OpPassManager &pm, llvm::StringRef sequenceParallel,
                              bool fold = true);

/// tp-apply-plan, the collectives pipeline and tp-partition: what each rank runs.
void buildShardingPipeline(mlir::OpPassManager &pm, const ShardingOptions &options);

/// Which forward runs a given token count. `tpc compile` emits the sequence-parallel forward
/// when `enabled` and the runtime runs it for the counts `splits` accepts; `tpc analyze`
/// reports the same choice. One policy, so that what analyze says is what the binary does.
struct SequenceParallelPolicy {
  bool enabled = false; // the module has a sequence-parallel forward
  int64_t tp = 1;

  /// Enabled when asked for (--sequence-parallel) or named by the plan, on more than one rank.
  static SequenceParallelPolicy of(mlir::ModuleOp planned, bool requested);
  /// Whether `tokens` run split by tokens: only where they split evenly over the ranks.
  bool splits(int64_t tokens) const { return enabled && tokens >= tp && tokens % tp == 0; }
};

/// What a target decides for itself: which chains tp-fuse fuses, and whether linears of one
/// input are grouped (tp-group-linears). The CPU target's runtime calls BLAS and vectorized
/// loops and keeps each weight in its own buffer: none. The CUDA target's: all.
struct TargetDecisions {
  bool fuseElementwise = false, fuseNorm = false, fuseRotary = false, groupLinears = false;

  /// The defaults of a target ("cpu" or "cuda").
  static TargetDecisions forTarget(llvm::StringRef target);
};

/// tp-elide-collectives, tp-fuse (with the target's chains), tp-group-linears (when the
/// target groups) and tp-plan-arena, on a partitioned module.
void buildDecisionPipeline(mlir::OpPassManager &pm, const TargetDecisions &decisions);

struct ProgramOptions {
  bool sequenceParallel = false; // --sequence-parallel
  bool fold = true;
  TargetDecisions decisions;
};

/// The module a target lowers, from a module the plan has been applied to: @forward,
/// sharded and partitioned, and beside it, when the policy enables it,
/// @forward_sequence_parallel (marked tp.sequence_parallel) with the residual stream split by
/// tokens; then every decision pass. Null when a pass fails (its errors are reported, each
/// cause once: RepeatedDiagnosticHandler) or when the two forwards would shard a parameter
/// differently.
mlir::OwningOpRef<mlir::ModuleOp> buildProgram(mlir::ModuleOp planned,
                                               const ProgramOptions &options);

} // namespace tpc

#endif // TPC_TRANSFORMS_PIPELINE_H
