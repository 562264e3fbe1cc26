// The pipeline tpc runs in-process; tpc-opt runs the same passes one by one.
#include "tpc/Transforms/Pipeline.h"

#include "tpc/Transforms/Passes.h"

using namespace tpc;

void tpc::buildCollectivesPipeline(mlir::OpPassManager &pm, llvm::StringRef sequenceParallel,
                                   bool fold) {
  pm.addPass(tp::createTPLastToken());
  tp::TPPropagateLayoutsOptions propagate;
  propagate.sequenceParallel = sequenceParallel.str();
  pm.addPass(tp::createTPPropagateLayouts(propagate));
  pm.addPass(tp::createTPInsertRedistribute());
  if (fold)
    pm.addPass(tp::createTPFoldRedistribute());
  pm.addPass(tp::createTPLowerRedistribute());
}

void tpc::buildShardingPipeline(mlir::OpPassManager &pm, const ShardingOptions &options) {
  tp::TPApplyPlanOptions plan;
  plan.planPath = options.planPath;
  plan.strategiesPath = options.strategiesPath;
  plan.tpSize = options.tpSize;
  pm.addPass(tp::createTPApplyPlan(plan));
  buildCollectivesPipeline(pm, options.sequenceParallel);
  pm.addPass(tp::createTPPartition());
}
