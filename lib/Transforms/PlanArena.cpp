// tp-plan-arena: every activation a forward stores gets an offset in one arena, planned by
// lifetime, so that a forward over n tokens allocates nothing. Offsets are in elements per
// token: a [n, c] value takes c, and the arena for n tokens is the function's size times n
// (values of one row, after tp.last_token, take a whole slot as well; what that wastes is
// one row of each, which is not worth a second arena). Every slot starts at a multiple of the
// target's arena_align elements, so its address is aligned for any token count.
#include "tpc/Transforms/Passes.h"
#include "tpc/Dialect/TP/Sums.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPPLANARENA
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

/// A slot in the arena while its value lives: [offset, offset + size), until the op at
/// position `end` has run.
struct Live {
  int64_t offset, size;
  size_t end;
};

/// The lowest offset, a multiple of `align`, where `size` fits between the live slots.
int64_t firstFit(std::vector<Live> &live, int64_t size, int64_t align) {
  llvm::sort(live, [](const Live &a, const Live &b) { return a.offset < b.offset; });
  int64_t offset = 0;
  for (const Live &l : live) {
    if (offset + size <= l.offset)
      break;
    int64_t end = l.offset + l.size;
    offset = std::max(offset, (end + align - 1) / align * align);
  }
  return offset;
}

struct TPPlanArenaPass : tpc::tp::impl::TPPlanArenaBase<TPPlanArenaPass> {
  using TPPlanArenaBase::TPPlanArenaBase;

  void runOnOperation() override {
    int64_t blockSize = kvBlockSize;
    if (blockSize < 1) {
      getOperation().emitError() << "tp-plan-arena: kv-block-size must be at least 1, not "
                                 << blockSize;
      return signalPassFailure();
    }
    // The target's slot alignment (none without a target).
    TargetAttr target = getTarget(getOperation());
    align = target ? target.getArenaAlign() : 1;
    activationBytes = target ? target.activationBytes() : int64_t(sizeof(float));
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        plan(func);
    bool attention = false;
    getOperation().walk([&](AttentionOp) { attention = true; });
    if (attention)
      getOperation()->setAttr(kKvBlockSizeAttrName,
                              Builder(&getContext()).getI64IntegerAttr(blockSize));
  }

  void plan(func::FuncOp func) {
    Block &block = func.getBody().front();
    llvm::DenseMap<Operation *, size_t> position;
    llvm::DenseMap<int64_t, size_t> stageEnd; // each pipeline stage's last op (its sends)
    for (Operation &op : block) {
      position[&op] = position.size();
      if (isa<func::ReturnOp>(op)) // the engine's to receive, no stage's to run
        continue;
      auto transfer = dyn_cast<TransferOp>(op);
      stageEnd[transfer ? transfer.getFrom() : stageOf(&op)] = position.size() - 1;
    }
    // The last top-level op that reads `v` (a read inside a unit is the unit's). A value a
    // tp.transfer sends lives to the end of its stage's ops: a stage's runtime may hold its
    // sends until its forward is done (Communicator::holdSends).
    auto lastRead = [&](Value v, size_t from) {
      size_t end = from;
      for (Operation *user : v.getUsers())
        if (auto transfer = dyn_cast<TransferOp>(user))
          end = std::max(end, stageEnd.lookup(transfer.getFrom()));
        else if (Operation *top = block.findAncestorOpInBlock(*user))
          end = std::max(end, position.lookup(top));
      return end;
    };
    Builder builder(func.getContext());
    std::vector<Live> live;
    int64_t size = 0;
    for (Operation &op : block) {
      if (isa<WeightOp, func::ReturnOp>(op) || op.getNumResults() == 0)
        continue;
      size_t at = position.lookup(&op);
      llvm::erase_if(live, [&](const Live &l) { return l.end < at; });
      SmallVector<int64_t> offsets;
      auto fused = dyn_cast<FusedOp>(op);
      if (fused && fused.getKind() == FusedKind::linears) {
        // One slot: each member's [n, columns] block after the other, so one row of all of
        // them is one row of the concatenated weights' GEMM.
        int64_t width = 0;
        size_t end = at;
        for (Value result : op.getResults()) {
          width += columns(result);
          end = std::max(end, lastRead(result, at));
        }
        int64_t offset = firstFit(live, width, align);
        live.push_back({offset, width, end});
        for (Value result : op.getResults()) {
          offsets.push_back(offset);
          offset += columns(result);
        }
        size = std::max(size, offset);
      } else {
        for (Value result : op.getResults()) {
          int64_t width = slotWidth(result);
          int64_t offset = firstFit(live, width, align);
          live.push_back({offset, width, lastRead(result, at)});
          offsets.push_back(offset);
          size = std::max(size, offset + width);
        }
      }
      op.setAttr(kArenaAttrName, builder.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr(kArenaSizeAttrName, builder.getI64IntegerAttr(size));
  }

  /// A value's slot, in activation elements per token: its columns, or as many as hold its
  /// columns in fp32 where it is a sum of squares (Sums.h).
  int64_t slotWidth(Value v) const {
    int64_t bytes = elementBytesOf(v, activationBytes);
    return (columns(v) * bytes + activationBytes - 1) / activationBytes;
  }

  int64_t align = 1, activationBytes = sizeof(float);
};

} // namespace
