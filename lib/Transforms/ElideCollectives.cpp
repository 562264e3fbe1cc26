// tp-elide-collectives: on a mesh of one rank a collective moves nothing, so the program must
// not call one; every collective and local reshard is replaced by its input, and value types
// lose the placements that one rank makes meaningless.
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPELIDECOLLECTIVES
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

Type withoutPlacement(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getEncoding() ? RankedTensorType::get(tensor.getShape(),
                                                                tensor.getElementType())
                                        : type;
}

struct TPElideCollectivesPass : tpc::tp::impl::TPElideCollectivesBase<TPElideCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // A module that never had a mesh is not one rank's: say so rather than guess.
    FailureOr<int64_t> mesh = requireMeshSize(module);
    if (failed(mesh))
      return signalPassFailure();
    if (*mesh != 1)
      return;
    SmallVector<Operation *> moves;
    module.walk([&](Operation *op) {
      if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, LocalReshardOp,
              RedistributeOp>(op))
        moves.push_back(op);
    });
    for (Operation *op : moves) {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
    }
    // Placements: gone from every value, block argument and signature.
    module.walk([](Operation *op) {
      for (Value result : op->getResults())
        result.setType(withoutPlacement(result.getType()));
      for (Region &region : op->getRegions())
        for (Block &block : region)
          for (BlockArgument arg : block.getArguments())
            arg.setType(withoutPlacement(arg.getType()));
      if (auto func = dyn_cast<func::FuncOp>(op)) {
        auto type = func.getFunctionType();
        SmallVector<Type> inputs, results;
        for (Type t : type.getInputs())
          inputs.push_back(withoutPlacement(t));
        for (Type t : type.getResults())
          results.push_back(withoutPlacement(t));
        func.setType(FunctionType::get(func.getContext(), inputs, results));
      }
    });
  }
};

} // namespace
