// tp-greedy-argmax: the gather of the vocabulary-split logits at the end of a forward, which a
// greedy step does not need whole, is marked argmax_if_greedy where the target's runtime can
// reduce it to each row's argmax on the ranks (#tp.target's greedy_argmax); with pipeline
// stages, the transfer that brings the logits back to the first stage too.
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
        // With pipeline stages the logits come back to the first stage: the transfer sends
        // the argmax, which the gather before it (if any) finds on the ranks.
        if (auto transfer = result.getDefiningOp<TransferOp>()) {
          if (!result.hasOneUse() || typeOf(transfer.getInput()).getRank() != 2)
            continue;
          transfer.setArgmaxIfGreedy(true);
          result = transfer.getInput();
        }
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
