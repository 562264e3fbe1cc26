// tp-fold-redistribute: remove as many redistributions as the layout rules allow (Triton's
// remove-layout-conversions applied to placements). Every choice between two ways of moving
// data is made by the cost model, through the planner.
#include "tpc/Analysis/Redistribute.h"
#include "tpc/Transforms/LayoutRules.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace tpc::tp {
#define GEN_PASS_DEF_TPFOLDREDISTRIBUTE
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

ParamOp paramOf(Value v) {
  auto weight = v.getDefiningOp<WeightOp>();
  return weight ? SymbolTable::lookupNearestSymbolFrom<ParamOp>(weight, weight.getParamAttr())
                : ParamOp();
}

class Folder {
public:
  Folder(ModuleOp module, int64_t tp) : module(module), rules(module.getContext(), tp), tp(tp) {}

  void run() {
    SmallVector<LinearOp> linears;
    module.walk([&](LinearOp op) { linears.push_back(op); });
    for (LinearOp linear : linears)
      keepGatheredDataSharded(linear);
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<Operation *> ops;
      module.walk([&](Operation *op) {
        if (isa<RedistributeOp, AddOp>(op))
          ops.push_back(op);
      });
      for (Operation *op : ops) {
        if (auto add = dyn_cast<AddOp>(op))
          changed |= joinPartialSum(add);
        else if (auto redistribute = dyn_cast<RedistributeOp>(op))
          changed |= composeOrDrop(redistribute);
      }
    }
  }

private:
  double cost(PlacementAttr from, PlacementAttr to, int64_t rank) {
    FailureOr<SmallVector<RedistributeStep>> plan = planRedistribute(from, to, rank, tp);
    return succeeded(plan) ? planCost(*plan, tp) : std::numeric_limits<double>::infinity();
  }

  /// The rule's answer for `op` with these operand placements, without diagnostics: a
  /// placement that does not work is only an option not taken here.
  FailureOr<OpLayout> quietInfer(Operation *op, ArrayRef<PlacementAttr> in) {
    ScopedDiagnosticHandler silence(module.getContext(), [](Diagnostic &) { return success(); });
    return rules.infer(op, in);
  }

  SmallVector<PlacementAttr> placementsOf(Operation *op) {
    SmallVector<PlacementAttr> in;
    for (Value v : op->getOperands())
      in.push_back(getPlacement(v) ? normalizePlacement(getPlacement(v), rankOf(v))
                                   : rules.replicate());
    return in;
  }

  /// (a: P->X) + (b: P->X) = (a + b: P) -> X: two sums share one reduce.
  bool joinPartialSum(AddOp add) {
    auto lhs = add.getLhs().getDefiningOp<RedistributeOp>();
    auto rhs = add.getRhs().getDefiningOp<RedistributeOp>();
    if (!lhs || !rhs || lhs == rhs || !lhs->hasOneUse() || !rhs->hasOneUse() ||
        !isa<PartialAttr>(lhs.getSrc()) || !isa<PartialAttr>(rhs.getSrc()) ||
        lhs.getDst() != rhs.getDst())
      return false;
    OpBuilder builder(add);
    auto sum = AddOp::create(builder, add.getLoc(), withPlacement(add.getType(), lhs.getSrc()),
                             add.getModuleAttr(), lhs.getInput(), rhs.getInput());
    auto reduce = RedistributeOp::create(builder, add.getLoc(), add.getType(), sum.getResult(),
                                         add.getModuleAttr());
    add.replaceAllUsesWith(reduce.getResult());
    add.erase();
    lhs.erase();
    rhs.erase();
    return true;
  }

  bool composeOrDrop(RedistributeOp op) {
    Value input = op.getInput();
    int64_t rank = rankOf(input);
    if (samePlacement(op.getSrc(), op.getDst(), rank)) {
      op.replaceAllUsesWith(input);
      op.erase();
      return true;
    }
    // Two in a row: one, when the planner finds the direct way cheaper (or nothing to do).
    if (auto first = input.getDefiningOp<RedistributeOp>(); first && first->hasOneUse()) {
      PlacementAttr a = first.getSrc(), b = first.getDst(), c = op.getDst();
      if (samePlacement(a, c, rank)) {
        op.replaceAllUsesWith(first.getInput());
        op.erase();
        first.erase();
        return true;
      }
      if (cost(a, c, rank) < cost(a, b, rank) + cost(b, c, rank)) {
        OpBuilder builder(op);
        auto direct = RedistributeOp::create(builder, op.getLoc(), op.getType(),
                                             first.getInput(), first.getModuleAttr());
        op.replaceAllUsesWith(direct.getResult());
        op.erase();
        first.erase();
        return true;
      }
    }
    // Consumers that take the source placement as well, computing the same, need nothing.
    // (A following redistribution is composed above, by cost; a return keeps its types.)
    for (OpOperand &use : op->getUses()) {
      Operation *user = use.getOwner();
      if (isa<RedistributeOp, func::ReturnOp>(user))
        return false;
      SmallVector<PlacementAttr> in = placementsOf(user);
      unsigned index = use.getOperandNumber();
      in[index] = normalizePlacement(op.getSrc(), rank);
      FailureOr<OpLayout> layout = quietInfer(user, in);
      if (failed(layout) || layout->operands != in)
        return false;
      if (user->getNumResults() == 1 && layout->result &&
          !samePlacement(layout->result, getPlacement(user->getResult(0)),
                         rankOf(user->getResult(0))))
        return false;
      if (user->getNumResults() == 1 && !layout->result && getPlacement(user->getResult(0)))
        return false;
    }
    op.replaceAllUsesWith(input);
    op.erase();
    return true;
  }

  /// transformers' Phi3 plan gathers a colwise linear's output (colwise_gather_output) and
  /// splits it again at a rowwise_split_input linear. When everything in between works on
  /// whole heads or blocks, shard the colwise weight as a strided shard of the blocks the
  /// output is sliced into: every rank then holds its part of each block, and neither the
  /// gather nor the splits are needed.
  void keepGatheredDataSharded(LinearOp linear) {
    ParamOp weight = paramOf(linear.getWeight());
    Value result = linear.getResult();
    if (!weight || !linear.getWeight().hasOneUse() || !result.hasOneUse())
      return;
    PlacementAttr placement = getPlacement(linear.getWeight());
    if (!placement || normalizePlacement(placement, 2) != rules.shard(0))
      return;
    auto gather = dyn_cast<RedistributeOp>(*result.getUsers().begin());
    if (!gather || !isa<ReplicateAttr>(gather.getDst()))
      return;

    // The region the gathered data flows through, up to the splits.
    llvm::SetVector<Operation *> region;
    SmallVector<RedistributeOp> splits;
    SmallVector<Value> work = {gather.getResult()};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (auto split = dyn_cast<RedistributeOp>(user)) {
          if (!isa<ReplicateAttr>(split.getSrc()) ||
              normalizePlacement(split.getDst(), 2) != rules.shard(1))
            return;
          if (!llvm::is_contained(splits, split))
            splits.push_back(split);
          continue;
        }
        if (!isa<SliceOp, RotaryOp, AttentionOp, SiluOp, GeluOp, MulOp, AddOp>(user))
          return;
        if (region.insert(user))
          work.push_back(user->getResult(0));
      }
    }
    if (splits.empty())
      return;

    // The blocks: what the gathered output is sliced into (gaps are blocks too).
    int64_t features = cast<RankedTensorType>(result.getType()).getDimSize(1);
    SmallVector<std::pair<int64_t, int64_t>> ranges;
    for (Operation *user : gather->getUsers()) {
      auto slice = dyn_cast<SliceOp>(user);
      if (!slice)
        continue;
      if (normalizeDim(slice.getDim(), 2) != 1)
        return;
      ranges.push_back({static_cast<int64_t>(slice.getOffset()),
                        static_cast<int64_t>(slice.getOffset() + slice.getSize())});
    }
    llvm::sort(ranges);
    SmallVector<int64_t> blocks;
    int64_t at = 0;
    for (auto [begin, end] : ranges) {
      if (begin < at)
        return; // overlapping slices: not a partition into blocks
      if (begin > at)
        blocks.push_back(begin - at);
      blocks.push_back(end - begin);
      at = end;
    }
    if (at < features)
      blocks.push_back(features - at);
    MLIRContext *ctx = module.getContext();
    PlacementAttr newWeight = blocks.size() >= 2
                                  ? PlacementAttr(StridedShardAttr::get(ctx, 0, blocks))
                                  : rules.shard(0);

    // Try it: every op of the region must take the sharded data as it comes.
    llvm::DenseMap<Value, PlacementAttr> trial;
    SmallVector<PlacementAttr> linearIn = placementsOf(linear);
    linearIn[1] = newWeight;
    FailureOr<OpLayout> linearLayout = quietInfer(linear, linearIn);
    if (failed(linearLayout))
      return;
    trial[gather.getResult()] = linearLayout->result;
    SmallVector<Operation *> ordered(region.begin(), region.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    for (Operation *op : ordered) {
      SmallVector<PlacementAttr> in = placementsOf(op);
      for (auto [i, v] : llvm::enumerate(op->getOperands()))
        if (PlacementAttr p = trial.lookup(v))
          in[i] = p;
      FailureOr<OpLayout> layout = quietInfer(op, in);
      if (failed(layout) || layout->operands != in)
        return;
      trial[op->getResult(0)] = layout->result;
    }
    for (RedistributeOp split : splits)
      if (trial.lookup(split.getInput()) != rules.shard(1))
        return;

    // It works: shard the weight (and bias) by blocks, and drop the gather and the splits.
    Value bias = linear.getBias();
    ParamOp biasParam = bias ? paramOf(bias) : ParamOp();
    if (bias && (!biasParam || !bias.hasOneUse()))
      return;
    weight.setPlacementAttr(newWeight);
    linear.getWeight().setType(withPlacement(linear.getWeight().getType(), newWeight));
    if (bias) { // a 1-D bias is split like the weight's rows
      biasParam.setPlacementAttr(newWeight);
      bias.setType(withPlacement(bias.getType(), newWeight));
    }
    result.setType(withPlacement(result.getType(), linearLayout->result));
    gather.replaceAllUsesWith(result);
    gather.erase();
    for (Operation *op : ordered)
      op->getResult(0).setType(withPlacement(op->getResult(0).getType(),
                                             trial.lookup(op->getResult(0))));
    for (RedistributeOp split : splits) {
      split.replaceAllUsesWith(split.getInput());
      split.erase();
    }
  }

public:
  /// A gather that only feeds replicated linears undoes a colwise split that a rowwise
  /// strategy on those linears would have used as it is (colwise q/k/v without a rowwise
  /// o_proj): warn, naming the module and the strategy that would avoid it.
  void warnAvoidableGathers() {
    module.walk([&](RedistributeOp op) {
      PlacementAttr src = normalizePlacement(op.getSrc(), rankOf(op.getInput()));
      bool featureSplit = src == rules.shard(1) ||
                          (isa<StridedShardAttr>(src) && cast<StridedShardAttr>(src).getDim() == 1);
      if (!featureSplit || !isa<ReplicateAttr>(op.getDst()) || op->use_empty())
        return;
      SmallVector<LinearOp> linears;
      for (Operation *user : op->getUsers()) {
        auto linear = dyn_cast<LinearOp>(user);
        if (!linear || linear.getInput() != op.getResult() ||
            !isa<ReplicateAttr>(getPlacement(linear.getWeight())))
          return;
        linears.push_back(linear);
      }
      for (LinearOp linear : linears)
        linear.emitWarning() << linear.getModule()
                             << ": its input arrives split by features and is gathered here; "
                                "'rowwise' for "
                             << linear.getModule() << " would take it as it is";
    });
  }

private:
  ModuleOp module;
  LayoutRules rules;
  int64_t tp;
};

struct TPFoldRedistributePass
    : tpc::tp::impl::TPFoldRedistributeBase<TPFoldRedistributePass> {
  void runOnOperation() override {
    FailureOr<int64_t> tp = requireMeshSize(getOperation());
    if (failed(tp))
      return signalPassFailure();
    Folder folder(getOperation(), *tp);
    folder.run();
    folder.warnAvoidableGathers();
    updateFunctionTypes(getOperation());
  }
};

} // namespace
