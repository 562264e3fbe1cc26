// The pipeline as tpc runs it in-process (docs/architecture.md); tpc-opt runs the same
// passes one by one.
#ifndef TPC_TRANSFORMS_PIPELINE_H
#define TPC_TRANSFORMS_PIPELINE_H

#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace tpc {

struct ShardingOptions {
  std::string planPath;
  std::string strategiesPath;
  int64_t tpSize = 1;
  int64_t ppSize = 1;              // pipeline stages
  std::vector<int64_t> ppSplit;    // decoder layers per stage; empty: balanced
  std::string sequenceParallel = "auto"; // auto, on or off
};

/// tp-assign-stages as a function, for the drivers (as plan::applyPlan is): on a module whose
/// mesh has pipeline stages, each op's stage; nothing at pp 1. `split`: layers per stage,
/// empty to balance them by the bytes a decode step reads at `kvTokens` of context.
mlir::LogicalResult assignStages(mlir::ModuleOp module, llvm::ArrayRef<int64_t> split,
                                 int64_t kvTokens = 2048);

/// tp-last-token, tp-propagate-layouts, tp-insert-redistribute, tp-fold-redistribute and
/// tp-lower-redistribute, on a module the plan has been applied to: the graph with every
/// collective explicit, shapes still global.
/// `fold` false leaves out tp-fold-redistribute (to see or run what folding removes).
void buildCollectivesPipeline(mlir::OpPassManager &pm, llvm::StringRef sequenceParallel,
                              bool fold = true);

/// tp-apply-plan, the collectives pipeline and tp-partition: what each rank runs.
void buildShardingPipeline(mlir::OpPassManager &pm, const ShardingOptions &options);

/// Whether a program built from `planned` has a sequence-parallel forward: when asked for
/// (--sequence-parallel) or named by the plan, on more than one rank. Which forward then runs
/// a token count is the program's to say (tp::forwardFor), not this function's.
bool wantsSequenceParallel(mlir::ModuleOp planned, bool requested);

/// tp-elide-collectives, tp-weight-storage (`weights`: its option, --weights-dtype),
/// tp-fuse, tp-group-linears and tp-plan-arena, on a partitioned module: what
/// tp-weight-storage, tp-fuse and tp-group-linears do is the module's #tp.target's to say.
void buildDecisionPipeline(mlir::OpPassManager &pm, llvm::StringRef weights = "stored");

struct ProgramOptions {
  bool sequenceParallel = false; // --sequence-parallel
  bool fold = true;
  tp::TargetAttr target; // set on the program as tp.target; the passes read it there
  std::string weights = "stored"; // --weights-dtype: tp-weight-storage's choice of types
};

/// The module a target lowers, from a module the plan has been applied to: `tp.target` set
/// to the options' target; @forward, sharded and partitioned, and beside it, when
/// wantsSequenceParallel,
/// @forward_sequence_parallel (marked tp.sequence_parallel) with the residual stream split by
/// tokens; then every decision pass. Null when a pass fails (its errors are reported, each
/// cause once: RepeatedDiagnosticHandler) or when the two forwards would shard a parameter
/// differently.
mlir::OwningOpRef<mlir::ModuleOp> buildProgram(mlir::ModuleOp planned,
                                               const ProgramOptions &options);

} // namespace tpc

#endif // TPC_TRANSFORMS_PIPELINE_H
