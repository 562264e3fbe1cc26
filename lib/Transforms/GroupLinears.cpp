// tp-group-linears: linears that read one input (q, k and v; gate and up) become one
// tp.fused linears unit. The target places their weights one after the other and their
// results one after the other in the arena, so the one-row input of a decode step is a single
// GEMM over the concatenated weights.
#include "tpc/Transforms/Fusion.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPGROUPLINEARS
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

struct TPGroupLinearsPass : tpc::tp::impl::TPGroupLinearsBase<TPGroupLinearsPass> {
  void runOnOperation() override {
    groups.clear();
    // Only a target whose runtime lays grouped weights one after the other groups them
    // (tpc-opt runs the pass on modules without a target too).
    if (TargetAttr target = getTarget(getOperation()); target && !target.getGroupLinears())
      return;
    // A parameter's weights lie in one place in memory, shared by every function of the
    // module: it may belong to one group only, the same one wherever it is grouped.
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        group(func.getBody().front());
  }

  void group(Block &block) {
    llvm::MapVector<Value, SmallVector<LinearOp>> byInput;
    for (LinearOp linear : block.getOps<LinearOp>())
      if (linear.getWeight().getDefiningOp<WeightOp>())
        byInput[linear.getInput()].push_back(linear);
    for (auto &[input, members] : byInput) {
      if (members.size() < 2 || isSplitByTokens(input))
        continue;
      SmallVector<Attribute> weights, biases;
      if (!groupable(members, weights, biases) || !fits(weights) || !fits(biases))
        continue;
      // The results are read after the last member only: the unit stands in its place.
      LinearOp last = members.back();
      bool readEarly = llvm::any_of(members, [&](LinearOp linear) {
        return llvm::any_of(linear.getResult().getUsers(), [&](Operation *user) {
          // A reader inside a unit tp-fuse made reads where the unit stands.
          Operation *top = block.findAncestorOpInBlock(*user);
          return top && top->isBeforeInBlock(last);
        });
      });
      if (readEarly)
        continue;
      remember(weights);
      remember(biases);
      SmallVector<Operation *> ops;
      SmallVector<Value> results;
      for (LinearOp linear : members) {
        ops.push_back(linear);
        results.push_back(linear.getResult());
      }
      makeFused(FusedKind::linears, ops, results);
    }
  }

  /// Biases on all or none; a Partial result adds its bias on rank 0 only, which is not one
  /// GEMM's epilogue. Collects the parameters of the weights and biases.
  static bool groupable(MutableArrayRef<LinearOp> members, SmallVector<Attribute> &weights,
                        SmallVector<Attribute> &biases) {
    bool biased = bool(members.front().getBias());
    for (LinearOp linear : members) {
      if (bool(linear.getBias()) != biased)
        return false;
      weights.push_back(linear.getWeight().getDefiningOp<WeightOp>().getParamAttr());
      if (!biased)
        continue;
      auto bias = linear.getBias().getDefiningOp<WeightOp>();
      if (!bias || isa_and_nonnull<PartialAttr>(getPlacement(linear.getResult())))
        return false;
      biases.push_back(bias.getParamAttr());
    }
    return true;
  }

  /// A group may be formed again (another function) but may not overlap another.
  bool fits(ArrayRef<Attribute> params) const {
    for (const SmallVector<Attribute> &g : groups) {
      if (ArrayRef<Attribute>(g) == params)
        return true;
      for (Attribute p : params)
        if (llvm::is_contained(g, p))
          return false;
    }
    return true;
  }
  void remember(ArrayRef<Attribute> params) {
    if (!params.empty() && !llvm::is_contained(groups, SmallVector<Attribute>(params)))
      groups.emplace_back(params);
  }

  std::vector<SmallVector<Attribute>> groups;
};

} // namespace
