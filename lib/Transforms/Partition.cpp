// tp-partition: from global shapes to what each rank holds. A sharded dim becomes its
// torch.chunk piece, ceil(n / tp), with trailing ranks padded (a strided shard: the piece of
// every block); head counts are divided by tp; parameters record in a shard descriptor which
// part of the HF tensor the loader reads for each rank, unless tp-propagate-layouts has
// already (whole heads per rank where tp does not divide them).
#include "tpc/Analysis/Redistribute.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPPARTITION
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

int64_t piece(int64_t size, int64_t chunks) {
  return ShapedType::isDynamic(size) ? size : (size + chunks - 1) / chunks;
}

/// The shape one rank holds of a tensor of `shape` placed as `placement`.
SmallVector<int64_t> localShape(ArrayRef<int64_t> shape, PlacementAttr placement, int64_t tp) {
  SmallVector<int64_t> local(shape);
  if (!placement)
    return local;
  placement = normalizePlacement(placement, shape.size());
  if (auto shard = dyn_cast<ShardAttr>(placement)) {
    local[shard.getDim()] = piece(shape[shard.getDim()], tp);
  } else if (auto strided = dyn_cast<StridedShardAttr>(placement)) {
    int64_t total = 0;
    for (int64_t block : strided.getBlocks())
      total += piece(block, tp);
    local[strided.getDim()] = total;
  }
  return local;
}

bool isSplit(Value v, int64_t dim) {
  PlacementAttr p = getPlacement(v);
  if (!p)
    return false;
  return splitDim(normalizePlacement(p, rankOf(v))) == dim;
}

struct TPPartitionPass : tpc::tp::impl::TPPartitionBase<TPPartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<int64_t> mesh = requireMeshSize(module);
    if (failed(mesh))
      return signalPassFailure();
    int64_t tp = *mesh;
    MLIRContext *ctx = &getContext();

    // Local offsets of slices first, while the input types are still global.
    module.walk([&](SliceOp slice) {
      auto strided = dyn_cast_or_null<StridedShardAttr>(
          getPlacement(slice.getInput()) ? normalizePlacement(getPlacement(slice.getInput()), 2)
                                         : PlacementAttr());
      if (!strided || strided.getDim() != normalizeDim(slice.getDim(), 2))
        return;
      int64_t offset = 0, localOffset = 0, localSize = 0;
      for (int64_t block : strided.getBlocks()) {
        if (offset >= static_cast<int64_t>(slice.getOffset()) &&
            offset < static_cast<int64_t>(slice.getOffset() + slice.getSize()))
          localSize += piece(block, tp);
        else if (offset < static_cast<int64_t>(slice.getOffset()))
          localOffset += piece(block, tp);
        offset += block;
      }
      slice.setOffset(localOffset);
      slice.setSize(localSize);
    });

    // Head counts: per rank, where the heads are split.
    module.walk([&](AttentionOp attention) {
      if (isSplit(attention.getQuery(), 1))
        attention.setNumHeads(attention.getNumHeads() / tp);
      if (isSplit(attention.getKey(), 1))
        attention.setNumKvHeads(attention.getNumKvHeads() / tp);
    });

    // Parameters: the local type and what to load.
    for (ParamOp param : module.getOps<ParamOp>()) {
      PlacementAttr placement = param.getPlacementAttr();
      RankedTensorType type = param.getTensorType();
      if (!placement || isa<ReplicateAttr>(placement))
        continue;
      placement = normalizePlacement(placement, type.getRank());
      if (param.getShardAttr()) { // each rank's extent is decided already (uneven heads)
        param.setType(type.clone(localShape(type.getShape(), placement, tp)));
        continue;
      }
      int64_t repeat = param.getHeadRepeat().value_or(1);
      SmallVector<int64_t> hfShape(type.getShape());
      int64_t dim;
      SmallVector<int64_t> offsets, sizes;
      if (auto shard = dyn_cast<ShardAttr>(placement)) {
        dim = shard.getDim();
        hfShape[dim] /= repeat; // virtual KV heads: the HF tensor has the real ones
        offsets = {0};
        sizes = {hfShape[dim]};
      } else {
        auto strided = cast<StridedShardAttr>(placement);
        dim = strided.getDim();
        int64_t at = 0;
        for (int64_t block : strided.getBlocks()) {
          offsets.push_back(at);
          sizes.push_back(block);
          at += block;
        }
      }
      param.setShardAttr(ShardDescAttr::get(ctx, dim, hfShape, offsets, sizes, tp / repeat,
                                            ArrayRef<int64_t>()));
      param.setType(type.clone(localShape(type.getShape(), placement, tp)));
    }

    // Every value: its local shape.
    auto localize = [&](Value v) {
      auto type = dyn_cast<RankedTensorType>(v.getType());
      if (!type || !getPlacement(type))
        return;
      v.setType(RankedTensorType::get(localShape(type.getShape(), getPlacement(type), tp),
                                      type.getElementType(), type.getEncoding()));
    };
    module.walk([&](Operation *op) {
      for (Region &region : op->getRegions())
        for (Block &block : region)
          for (BlockArgument arg : block.getArguments())
            localize(arg);
      for (Value result : op->getResults())
        localize(result);
    });
    updateFunctionTypes(module);
  }
};

} // namespace
