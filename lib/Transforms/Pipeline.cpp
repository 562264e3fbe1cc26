// The pipeline tpc runs in-process; tpc-opt runs the same passes one by one.
#include "tpc/Transforms/Pipeline.h"

#include "tpc/Dialect/TP/RepeatedDiagnostics.h"
#include "tpc/Plan/Plan.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace tpc;

void tpc::buildCollectivesPipeline(OpPassManager &pm, StringRef sequenceParallel, bool fold) {
  pm.addPass(tp::createTPLastToken());
  tp::TPPropagateLayoutsOptions propagate;
  propagate.sequenceParallel = sequenceParallel.str();
  pm.addPass(tp::createTPPropagateLayouts(propagate));
  pm.addPass(tp::createTPInsertRedistribute());
  if (fold)
    pm.addPass(tp::createTPFoldRedistribute());
  pm.addPass(tp::createTPLowerRedistribute());
}

void tpc::buildShardingPipeline(OpPassManager &pm, const ShardingOptions &options) {
  tp::TPApplyPlanOptions plan;
  plan.planPath = options.planPath;
  plan.strategiesPath = options.strategiesPath;
  plan.tpSize = options.tpSize;
  plan.ppSize = options.ppSize;
  pm.addPass(tp::createTPApplyPlan(plan));
  tp::TPAssignStagesOptions stages;
  stages.split.assign(options.ppSplit.begin(), options.ppSplit.end());
  pm.addPass(tp::createTPAssignStages(stages));
  buildCollectivesPipeline(pm, options.sequenceParallel);
  pm.addPass(tp::createTPPartition());
  pm.addPass(tp::createTPInsertTransfers());
}

bool tpc::wantsSequenceParallel(ModuleOp planned, bool requested) {
  return (requested || plan::namesSequenceParallel(planned)) &&
         tp::getMeshSize(planned).value_or(1) > 1;
}

void tpc::buildDecisionPipeline(OpPassManager &pm, StringRef weights) {
  pm.addPass(tp::createTPElideCollectives());
  pm.addPass(tp::createTPGreedyArgmax());
  pm.addPass(tp::createTPWeightStorage({weights.str()}));
  pm.addPass(tp::createTPFuse());
  pm.addPass(tp::createTPGroupLinears());
  pm.addPass(tp::createTPPlanArena());
}

namespace {

func::FuncOp forwardOf(ModuleOp module) {
  auto funcs = module.getOps<func::FuncOp>();
  return std::distance(funcs.begin(), funcs.end()) == 1 ? *funcs.begin() : func::FuncOp();
}

/// Moves the forward of `split` into `into` as @forward_sequence_parallel. Both were
/// partitioned from one module, so their parameters must be sharded the same way: the
/// loader reads each parameter once.
LogicalResult addSequenceParallelForward(ModuleOp into, ModuleOp split) {
  func::FuncOp plain = forwardOf(into), forward = forwardOf(split);
  if (!plain || !forward)
    return into.emitError() << "a program needs exactly one function, the forward";
  auto mine = into.getOps<tp::ParamOp>(), theirs = split.getOps<tp::ParamOp>();
  if (std::distance(mine.begin(), mine.end()) != std::distance(theirs.begin(), theirs.end()))
    return into.emitError() << "the sequence-parallel forward has other parameters";
  for (auto [a, b] : llvm::zip(mine, theirs))
    if (a.getSymName() != b.getSymName() || a.getType() != b.getType() ||
        a.getShardAttr() != b.getShardAttr())
      return b.emitError() << "parameter " << b.getSymName()
                           << " is sharded differently with sequence parallelism ("
                           << b.getType() << " vs " << a.getType()
                           << "); its weights are loaded once, for both forwards";
  forward->moveAfter(plain);
  forward.setName("forward_sequence_parallel");
  // The rule that decides which forward runs a token count, decided here once: the split
  // forward runs what divides evenly over the ranks.
  forward->setAttr(tp::kSequenceParallelAttrName,
                   IntegerAttr::get(IntegerType::get(into.getContext(), 64),
                                    tp::getMeshSize(into).value_or(1)));
  return success();
}

} // namespace

OwningOpRef<ModuleOp> tpc::buildProgram(ModuleOp planned, const ProgramOptions &options) {
  bool sequenceParallel = wantsSequenceParallel(planned, options.sequenceParallel);
  MLIRContext *ctx = planned.getContext();
  if (!options.target) {
    planned.emitError() << "buildProgram needs a target";
    return nullptr;
  }
  if (sequenceParallel && tp::getPipelineStages(planned) > 1) {
    planned.emitError() << "sequence parallelism with pipeline stages (--pp "
                        << tp::getPipelineStages(planned)
                        << ") is not supported yet; leave out --sequence-parallel";
    return nullptr;
  }
  // Both forwards run the sharding passes: what they find is said once, and once for all
  // layers.
  tp::RepeatedDiagnosticHandler onePerCause(ctx);
  auto shard = [&](StringRef sequence) -> OwningOpRef<ModuleOp> {
    OwningOpRef<ModuleOp> copy = planned.clone();
    (*copy)->setAttr(tp::kTargetAttrName, options.target);
    PassManager pm(ctx);
    buildCollectivesPipeline(pm, sequence, options.fold);
    pm.addPass(tp::createTPPartition());
    pm.addPass(tp::createTPInsertTransfers());
    if (failed(pm.run(*copy)))
      return nullptr;
    return copy;
  };
  OwningOpRef<ModuleOp> program = shard(sequenceParallel ? "off" : "auto");
  if (!program)
    return nullptr;
  if (sequenceParallel) {
    OwningOpRef<ModuleOp> split = shard("on");
    if (!split || failed(addSequenceParallelForward(*program, *split)))
      return nullptr;
  }
  PassManager pm(ctx);
  buildDecisionPipeline(pm, options.weights);
  if (failed(pm.run(*program)))
    return nullptr;
  return program;
}
