// tp-fuse: ops a target computes as one generated kernel become a tp.fused unit, so that the
// lowering, the arena planner and a test all see the same units. Which chains fuse is the
// target's choice (the module's #tp.target; the pass options can only leave kinds out): the
// CUDA target fuses all three kinds below, because a kernel launch and a round trip through
// HBM per elementwise op cost more than the math; the CPU target none.
#include "tpc/Transforms/Fusion.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPFUSE
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

bool tpc::tp::isElementwise(Operation *op) {
  return isa<SiluOp, GeluOp, ScaleOp, SoftcapOp, AddOp, MulOp>(op);
}

FusedOp tpc::tp::makeFused(FusedKind kind, ArrayRef<Operation *> members,
                           ArrayRef<Value> stored) {
  Operation *last = members.back();
  OpBuilder builder(last);
  SmallVector<Type> types;
  for (Value v : stored)
    types.push_back(v.getType());
  auto fused = FusedOp::create(builder, last->getLoc(), types, kind);
  Block *body = new Block;
  fused.getBody().push_back(body);
  for (Operation *op : members)
    op->moveBefore(body, body->end());
  builder.setInsertionPointToEnd(body);
  YieldOp::create(builder, last->getLoc(), stored);
  for (auto [storedValue, result] : llvm::zip(stored, fused.getResults()))
    Value(storedValue).replaceUsesWithIf(result, [&](OpOperand &use) {
      return !fused->isProperAncestor(use.getOwner());
    });
  return fused;
}

namespace {

struct TPFusePass : tpc::tp::impl::TPFuseBase<TPFusePass> {
  using TPFuseBase::TPFuseBase;

  void runOnOperation() override {
    kinds = {elementwise, norm, rotary};
    if (TargetAttr target = getTarget(getOperation()))
      kinds = {kinds.elementwise && target.getFuseElementwise(),
               kinds.norm && target.getFuseNorm(), kinds.rotary && target.getFuseRotary()};
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        fuse(func.getBody().front());
  }

  /// What this run fuses: the options, narrowed by the module's target where it has one.
  struct {
    bool elementwise, norm, rotary;
  } kinds{};

  void fuse(Block &block) {
    // An elementwise op whose one user is an elementwise op of its type is computed in that
    // user's kernel: `into` maps it there. A unit is named by its root, the op not fused
    // into another.
    llvm::DenseMap<Operation *, Operation *> into;
    if (kinds.elementwise)
      for (Operation &op : block) {
        if (!isElementwise(&op) || !op.getResult(0).hasOneUse())
          continue;
        Operation *user = *op.getResult(0).getUsers().begin();
        if (isElementwise(user) && user->getBlock() == &block &&
            user->getResult(0).getType() == op.getResult(0).getType())
          into[&op] = user;
      }
    auto rootOf = [&](Operation *op) {
      for (auto it = into.find(op); it != into.end(); it = into.find(op))
        op = it->second;
      return op;
    };
    llvm::MapVector<Operation *, SmallVector<Operation *>> chains; // root -> members, in order
    for (Operation &op : block)
      if (isElementwise(&op))
        chains[rootOf(&op)].push_back(&op);

    // An rms_norm right after a chain (only weights in between, so the norm's output may
    // take its slot as early as the chain's) is computed by the chain's kernel.
    llvm::DenseMap<Operation *, RMSNormOp> normOf;
    if (kinds.norm)
      for (RMSNormOp rms : block.getOps<RMSNormOp>()) {
        Operation *root = rms.getInput().getDefiningOp();
        if (!root || !chains.count(root) || !rms.getWeight().getDefiningOp<WeightOp>() ||
            rms.getSumSquares()) // a row split by features: its totals come from elsewhere
          continue;
        bool adjacent = true;
        for (Operation *op = root->getNextNode(); op != rms; op = op->getNextNode())
          adjacent &= isa<WeightOp>(op);
        if (adjacent)
          normOf[root] = rms;
      }

    // The rotaries of one attention's query and key, alike in all but their input.
    SmallVector<std::pair<RotaryOp, RotaryOp>> rotaries;
    if (kinds.rotary)
      for (AttentionOp attention : block.getOps<AttentionOp>()) {
        auto q = attention.getQuery().getDefiningOp<RotaryOp>();
        auto k = attention.getKey().getDefiningOp<RotaryOp>();
        if (!q || !k || q == k || !q->hasOneUse() || !k->hasOneUse() ||
            q.getHeadDim() != k.getHeadDim() || q.getTheta() != k.getTheta() ||
            q.getInvFreq() != k.getInvFreq() || q.getScalingAttr() != k.getScalingAttr() ||
            q.getPositions() != k.getPositions() || !sameRows(q.getInput(), k.getInput()))
          continue;
        rotaries.push_back(q->isBeforeInBlock(k) ? std::pair(q, k) : std::pair(k, q));
      }

    for (auto &[root, members] : chains) {
      if (RMSNormOp rms = normOf.lookup(root)) {
        members.push_back(rms);
        makeFused(FusedKind::norm, members, {root->getResult(0), rms.getResult()});
      } else if (members.size() > 1) {
        makeFused(FusedKind::elementwise, members, {root->getResult(0)});
      }
    }
    for (auto [first, second] : rotaries)
      makeFused(FusedKind::rotary, {first, second}, {first.getResult(), second.getResult()});
  }

  /// Two [tokens, features] values with the same rows on every rank.
  static bool sameRows(Value a, Value b) {
    auto ta = typeOf(a), tb = typeOf(b);
    return ta.getDimSize(0) == tb.getDimSize(0) && isSplitByTokens(a) == isSplitByTokens(b);
  }
};

} // namespace
