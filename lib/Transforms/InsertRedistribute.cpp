// tp-insert-redistribute: turn what tp-propagate-layouts recorded into tp.redistribute ops.
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPINSERTREDISTRIBUTE
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

StringAttr moduleAttr(Operation *op) { return op->getAttrOfType<StringAttr>("module"); }

struct TPInsertRedistributePass
    : tpc::tp::impl::TPInsertRedistributeBase<TPInsertRedistributePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder builder(&getContext());

    // Output hooks first, so consumers then see the hooked value.
    module.walk([&](Operation *op) {
      auto out = op->getAttrOfType<PlacementAttr>(kOutputLayoutAttrName);
      if (!out)
        return;
      op->removeAttr(kOutputLayoutAttrName);
      Value result = op->getResult(0);
      builder.setInsertionPointAfter(op);
      auto redistribute = RedistributeOp::create(
          builder, op->getLoc(), withPlacement(result.getType(), out), result, moduleAttr(op));
      result.replaceAllUsesExcept(redistribute.getResult(), redistribute);
    });

    // Then each operand that is not in the placement its consumer needs. Consumers that need
    // the same placement of one value share one redistribution, placed after its producer.
    llvm::DenseMap<std::pair<Value, Attribute>, Value> converted;
    module.walk([&](Operation *op) {
      auto layouts = op->getAttrOfType<ArrayAttr>(kOperandLayoutsAttrName);
      if (!layouts)
        return;
      op->removeAttr(kOperandLayoutsAttrName);
      for (auto [operand, required] : llvm::zip(op->getOpOperands(), layouts)) {
        Value value = operand.get();
        auto need = cast<PlacementAttr>(required);
        PlacementAttr have = getPlacement(value);
        int64_t rank = typeOf(value).getRank();
        if (!have || samePlacement(have, need, rank))
          continue;
        Value &to = converted[{value, need}];
        if (!to) {
          if (Operation *producer = value.getDefiningOp())
            builder.setInsertionPointAfter(producer);
          else
            builder.setInsertionPointToStart(cast<BlockArgument>(value).getOwner());
          // Attributed to the consumer's module, or the producer's where the consumer is
          // no module (the function's return).
          StringAttr module = moduleAttr(op);
          if (!module && value.getDefiningOp())
            module = moduleAttr(value.getDefiningOp());
          to = RedistributeOp::create(builder, op->getLoc(), withPlacement(value.getType(), need),
                                      value, module);
        }
        operand.set(to);
      }
    });
    updateFunctionTypes(module);
  }
};

} // namespace

void tpc::tp::updateFunctionTypes(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>()) {
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    func.setType(FunctionType::get(module.getContext(), func.getBody().getArgumentTypes(),
                                   ret.getOperandTypes()));
  }
}
