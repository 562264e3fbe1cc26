// tp-apply-plan: the pass form of plan::applyPlan, so the plan step runs alone in tpc-opt.
#include "tpc/Plan/Plan.h"
#include "tpc/Transforms/Passes.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPAPPLYPLAN
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;

namespace {

struct TPApplyPlanPass : tpc::tp::impl::TPApplyPlanBase<TPApplyPlanPass> {
  using Base::Base;

  void runOnOperation() override {
    tpc::plan::PlanOptions options;
    options.planPath = planPath;
    options.strategiesPath = strategiesPath;
    options.tpSize = tpSize;
    options.ppSize = ppSize;
    if (failed(tpc::plan::applyPlan(getOperation(), options)))
      signalPassFailure();
  }
};

} // namespace
