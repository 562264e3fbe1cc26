// tp-last-token: the ops between the forward's last token-mixing op and its output run on the
// last token only, which is all generation reads.
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPLASTTOKEN
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

RankedTensorType oneRow(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[0] = 1;
  return tensor.clone(shape);
}

struct TPLastTokenPass : tpc::tp::impl::TPLastTokenBase<TPLastTokenPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      SmallVector<Operation *> chain = lastTokenChain(func);
      if (chain.empty())
        continue;
      Value at = chain.back()->getOperand(0);
      Operation *first = chain.back();
      OpBuilder builder(first);
      auto last = LastTokenOp::create(builder, first->getLoc(), oneRow(at.getType()),
                                      getModuleName(first), at);
      first->setOperand(0, last.getResult());
      for (Operation *op : llvm::reverse(chain))
        op->getResult(0).setType(oneRow(op->getResult(0).getType()));
    }
    updateFunctionTypes(getOperation());
  }
};

} // namespace
