// tp-greedy-argmax: the gather of the vocabulary-split logits at the end of a forward, which a
// greedy step does not need whole, is marked argmax_if_greedy where the target's runtime can
// reduce it to each row's argmax on the ranks (#tp.target's greedy_argmax).
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPGREEDYARGMAX
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

struct TPGreedyArgmaxPass : tpc::tp::impl::TPGreedyArgmaxBase<TPGreedyArgmaxPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<TargetAttr> target = requireTarget(module, "tp-greedy-argmax");
    if (failed(target))
      return signalPassFailure();
    if (!target->getGreedyArgmax())
      return;
    module.walk([](func::ReturnOp ret) {
      for (Value result : ret.getOperands()) {
        auto gather = result.getDefiningOp<AllGatherOp>();
        if (!gather || !result.hasOneUse() || typeOf(gather.getInput()).getRank() != 2 ||
            normalizeDim(gather.getDim(), 2) != 1)
          continue;
        gather.setArgmaxIfGreedy(true);
      }
    });
  }
};

} // namespace
