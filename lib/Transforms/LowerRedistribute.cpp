// tp-lower-redistribute: each tp.redistribute becomes the planner's steps.
#include "tpc/Analysis/Redistribute.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPLOWERREDISTRIBUTE
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

DenseI64ArrayAttr blocksOf(PlacementAttr p) {
  if (auto strided = dyn_cast<StridedShardAttr>(p))
    return DenseI64ArrayAttr::get(p.getContext(), strided.getBlocks());
  return nullptr;
}

struct TPLowerRedistributePass
    : tpc::tp::impl::TPLowerRedistributeBase<TPLowerRedistributePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<int64_t> tp = requireMeshSize(module);
    if (failed(tp))
      return signalPassFailure();
    SmallVector<RedistributeOp> redistributes;
    module.walk([&](RedistributeOp op) { redistributes.push_back(op); });
    for (RedistributeOp op : redistributes) {
      auto type = cast<RankedTensorType>(op.getType());
      FailureOr<SmallVector<RedistributeStep>> plan =
          planRedistribute(op.getSrc(), op.getDst(), type.getRank(), *tp);
      if (failed(plan)) {
        op.emitError() << "no plan from " << op.getSrc().str() << " to " << op.getDst().str();
        return signalPassFailure();
      }
      OpBuilder builder(op);
      Value value = op.getInput();
      StringAttr module = op.getModuleAttr();
      Location loc = op.getLoc();
      for (const RedistributeStep &step : *plan) {
        Type to = withPlacement(type, step.to);
        switch (step.kind) {
        case CollectiveKind::AllReduce:
          value = AllReduceOp::create(builder, loc, to, value, ReduceKind::sum, module);
          break;
        case CollectiveKind::AllGather:
          value = AllGatherOp::create(builder, loc, to, value, splitDim(step.from),
                                      blocksOf(step.from), module);
          break;
        case CollectiveKind::ReduceScatter:
          value = ReduceScatterOp::create(builder, loc, to, value, splitDim(step.to),
                                          ReduceKind::sum, blocksOf(step.to), module);
          break;
        case CollectiveKind::AllToAll:
          value = AllToAllOp::create(builder, loc, to, value, splitDim(step.to), splitDim(step.from),
                                     module);
          break;
        case CollectiveKind::Local:
          value = LocalReshardOp::create(builder, loc, to, value, module);
          break;
        case CollectiveKind::Send:
        case CollectiveKind::Recv:
          llvm_unreachable("a redistribution plan moves nothing between pipeline stages");
        }
      }
      op.replaceAllUsesWith(value);
      op.erase();
    }
  }
};

} // namespace
