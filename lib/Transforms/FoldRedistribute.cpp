// tp-fold-redistribute: remove as many redistributions as the layout rules allow (Triton's
// remove-layout-conversions applied to placements). Every choice between two ways of moving
// data is made by the cost model, through the planner.
#include "tpc/Analysis/Redistribute.h"
#include "tpc/Transforms/LayoutRules.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/VirtualKVHeads.h"

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

  /// The gather of `linear`'s output, where a colwise linear's output goes only into one
  /// (colwise_gather_output); null otherwise.
  RedistributeOp gatherOf(LinearOp linear) {
    Value result = linear.getResult();
    PlacementAttr placement = getPlacement(linear.getWeight());
    if (!paramOf(linear.getWeight()) || !linear.getWeight().hasOneUse() || !result.hasOneUse() ||
        !placement || normalizePlacement(placement, 2) != rules.shard(0))
      return {};
    auto gather = dyn_cast<RedistributeOp>(*result.getUsers().begin());
    return gather && isa<ReplicateAttr>(gather.getDst()) ? gather : RedistributeOp();
  }

  /// How `linear`'s weight is split to keep its gathered output sharded: a strided shard of
  /// the blocks the gathered output is sliced into (gaps are blocks too), or a plain shard.
  FailureOr<PlacementAttr> blockedWeight(LinearOp linear, RedistributeOp gather) {
    int64_t features = typeOf(linear.getResult()).getDimSize(1);
    SmallVector<std::pair<int64_t, int64_t>> ranges;
    for (Operation *user : gather->getUsers()) {
      auto slice = dyn_cast<SliceOp>(user);
      if (!slice)
        continue;
      if (normalizeDim(slice.getDim(), 2) != 1)
        return failure();
      ranges.push_back({static_cast<int64_t>(slice.getOffset()),
                        static_cast<int64_t>(slice.getOffset() + slice.getSize())});
    }
    llvm::sort(ranges);
    SmallVector<int64_t> blocks;
    int64_t at = 0;
    for (auto [begin, end] : ranges) {
      if (begin < at)
        return failure(); // overlapping slices: not a partition into blocks
      if (begin > at)
        blocks.push_back(begin - at);
      blocks.push_back(end - begin);
      at = end;
    }
    if (at < features)
      blocks.push_back(features - at);
    if (blocks.size() >= 2)
      return PlacementAttr(StridedShardAttr::get(module.getContext(), 0, blocks));
    return rules.shard(0);
  }

  /// tp above the KV heads (a multiple of them): k and v, from their projections through the
  /// gathers, norms and rotaries to the attention, become tp virtual KV heads, each real one
  /// repeated tp / num_kv_heads times, as tp-propagate-layouts does for colwise k and v. A
  /// norm over the whole row (OLMo2's k_norm) has its weight repeated alike.
  bool widenToVirtualKVHeads(AttentionOp attention, const llvm::SetVector<Operation *> &linears,
                             WideningLog &undo) {
    std::optional<int64_t> repeat = virtualKVRepeat(attention, tp);
    if (!repeat)
      return true; // nothing to widen (or heads the attention's rule refuses)
    KVHeadWidener widener(*repeat, &undo);
    for (Value operand : {attention.getKey(), attention.getValue()}) {
      SmallVector<Operation *> chain;
      Value at = operand;
      while (Operation *op = at.getDefiningOp()) {
        if (!isa<RotaryOp, RMSNormOp, L2NormOp, RedistributeOp>(op))
          break;
        chain.push_back(op);
        at = op->getOperand(0);
      }
      auto linear = at.getDefiningOp<LinearOp>();
      if (!linear || !linears.contains(linear))
        return false;
      for (Value param : {linear.getWeight(), linear.getBias()})
        if (param && !widener.widenParam(param))
          return false;
      widener.widenValue(linear.getResult(), 1);
      for (Operation *op : chain) {
        if (auto norm = dyn_cast<RMSNormOp>(op); norm && !norm.getHeadDim())
          if (!widener.widenParam(norm.getWeight()))
            return false;
        widener.widenValue(op->getResult(0), 1);
      }
    }
    widener.widenAttention(attention, tp);
    return true;
  }

  /// What keepGatheredDataSharded works on: the gathered linears, the ops their gathered
  /// data flows through up to the splits, and the sharded placements it tries for them.
  struct GatheredRegion {
    llvm::SetVector<Operation *> linears, region;
    SmallVector<RedistributeOp> splits;
    llvm::DenseMap<Operation *, PlacementAttr> newWeights;
    llvm::DenseMap<Operation *, RedistributeOp> gathers;
    SmallVector<Operation *> ordered; // the region in block order
    llvm::DenseMap<Value, PlacementAttr> trial;
    SmallVector<std::pair<RMSNormOp, PlacementAttr>> distributed; // norm, its weight's split
  };

  /// transformers' Phi3 and OLMo2 plans gather colwise linears' outputs
  /// (colwise_gather_output) and split them again at a rowwise_split_input linear. When
  /// everything in between works on whole heads or blocks, or normalizes whole rows, shard
  /// the colwise weights as strided shards of the blocks their outputs are sliced into:
  /// every rank then holds its part of each block, and neither the gathers nor the splits
  /// are needed. A norm over a whole row (OLMo2's q_norm and k_norm) becomes a distributed
  /// one: each rank's sum of squares, one all_reduce of a scalar per token, and each rank
  /// scales its own columns. Gathers whose data meet in one op (q, k and v at the
  /// attention) are kept sharded together or not at all.
  void keepGatheredDataSharded(LinearOp seed) {
    if (!gatherOf(seed))
      return;
    GatheredRegion g;
    if (!collectGatheredRegion(seed, g) || g.splits.empty() || !blockWeights(g))
      return;
    g.ordered.assign(g.region.begin(), g.region.end());
    llvm::sort(g.ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    if (tryShardedRegion(g))
      commitShardedRegion(g);
  }

  /// The region the gathered data flows through, up to the splits, and every gathered
  /// linear whose data joins it. False where the data meets an op that cannot take it
  /// sharded, or a split other than to Shard(1).
  bool collectGatheredRegion(LinearOp seed, GatheredRegion &g) {
    SmallVector<Value> work;
    auto join = [&](LinearOp linear) {
      if (g.linears.insert(linear))
        work.push_back(gatherOf(linear).getResult());
    };
    join(seed);
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (auto split = dyn_cast<RedistributeOp>(user)) {
          if (!isa<ReplicateAttr>(split.getSrc()) ||
              normalizePlacement(split.getDst(), 2) != rules.shard(1))
            return false;
          if (!llvm::is_contained(g.splits, split))
            g.splits.push_back(split);
          continue;
        }
        if (!isa<SliceOp, RotaryOp, AttentionOp, SiluOp, GeluOp, MulOp, AddOp, RMSNormOp>(user))
          return false;
        if (auto norm = dyn_cast<RMSNormOp>(user);
            norm && (norm.getSumSquares() || norm.getInput() != v ||
                     (!norm.getHeadDim() && !norm.getWeight().hasOneUse())))
          return false;
        if (!g.region.insert(user))
          continue;
        work.push_back(user->getResult(0));
        for (Value operand : user->getOperands())
          if (LinearOp linear = gatheredLinearBehind(operand))
            join(linear);
      }
    }
    return true;
  }

  /// The linear whose gather `operand` comes from, through what a gathered value passes;
  /// null where it comes from none.
  LinearOp gatheredLinearBehind(Value operand) {
    while (Operation *def = operand.getDefiningOp()) {
      if (!isa<SliceOp, RotaryOp, RMSNormOp, SiluOp, GeluOp>(def))
        break;
      operand = def->getOperand(0);
    }
    if (auto gather = operand.getDefiningOp<RedistributeOp>())
      if (auto linear = gather.getInput().getDefiningOp<LinearOp>();
          linear && gatherOf(linear) == gather)
        return linear;
    return {};
  }

  /// Each gathered linear's gather and the blocked split of its weight; false where a
  /// weight has none, or a bias could not follow it.
  bool blockWeights(GatheredRegion &g) {
    for (Operation *op : g.linears) {
      auto linear = cast<LinearOp>(op);
      g.gathers[linear] = gatherOf(linear);
      FailureOr<PlacementAttr> placement = blockedWeight(linear, gatherOf(linear));
      Value bias = linear.getBias();
      if (failed(placement) || (bias && (!paramOf(bias) || !bias.hasOneUse())))
        return false;
      g.newWeights[linear] = *placement;
    }
    return true;
  }

  /// Try it: every op of the region must take the sharded data as it comes. Virtual KV
  /// heads widen types first; a failed try puts them back.
  bool tryShardedRegion(GatheredRegion &g) {
    WideningLog undo;
    for (Operation *op : g.ordered)
      if (auto attention = dyn_cast<AttentionOp>(op))
        if (!widenToVirtualKVHeads(attention, g.linears, undo)) {
          undo.restore();
          return false;
        }
    if (!inferShardedRegion(g)) {
      undo.restore();
      return false;
    }
    return true;
  }

  /// The placements the layout rules give the region's values with the weights blocked
  /// (g.trial), and the whole-row norms that become distributed; false where an op would
  /// want its operands otherwise, or a split would not receive Shard(1).
  bool inferShardedRegion(GatheredRegion &g) {
    for (Operation *op : g.linears) {
      auto linear = cast<LinearOp>(op);
      SmallVector<PlacementAttr> in = placementsOf(linear);
      in[1] = g.newWeights.lookup(linear);
      FailureOr<OpLayout> layout = quietInfer(linear, in);
      if (failed(layout))
        return false;
      g.trial[linear.getResult()] = layout->result;
      g.trial[g.gathers.lookup(linear).getResult()] = layout->result;
    }
    for (Operation *op : g.ordered) {
      SmallVector<PlacementAttr> in = placementsOf(op);
      for (auto [i, v] : llvm::enumerate(op->getOperands()))
        if (PlacementAttr p = g.trial.lookup(v))
          in[i] = p;
      auto norm = dyn_cast<RMSNormOp>(op);
      if (norm && !norm.getHeadDim()) {
        // A whole-row norm of a row split by features: the distributed form's rule.
        OpLayout layout = rules.normWithTotals(in[0]);
        if (isa<ReplicateAttr>(layout.result) || isa<PartialAttr>(layout.result) ||
            layout.operands[0] != in[0])
          return false;
        g.distributed.push_back({norm, layout.operands[1]});
        g.trial[norm.getResult()] = layout.result;
        continue;
      }
      FailureOr<OpLayout> layout = quietInfer(op, in);
      if (failed(layout) || layout->operands != in)
        return false;
      g.trial[op->getResult(0)] = layout->result;
    }
    for (RedistributeOp split : g.splits)
      if (g.trial.lookup(split.getInput()) != rules.shard(1))
        return false;
    return true;
  }

  /// It works: shard the weights (and biases) by blocks, drop the gathers and the splits,
  /// and distribute the norms.
  void commitShardedRegion(GatheredRegion &g) {
    for (Operation *op : g.linears) {
      auto linear = cast<LinearOp>(op);
      PlacementAttr placement = g.newWeights.lookup(linear);
      for (Value param : {linear.getWeight(), linear.getBias()}) {
        if (!param)
          continue; // a 1-D bias is split like the weight's rows
        paramOf(param).setPlacementAttr(placement);
        param.setType(withPlacement(param.getType(), placement));
      }
      Value result = linear.getResult();
      result.setType(withPlacement(result.getType(), g.trial.lookup(result)));
      RedistributeOp gather = g.gathers.lookup(linear);
      gather.replaceAllUsesWith(result);
      gather.erase();
    }
    for (Operation *op : g.ordered)
      op->getResult(0).setType(withPlacement(op->getResult(0).getType(),
                                             g.trial.lookup(op->getResult(0))));
    for (RedistributeOp split : g.splits) {
      split.replaceAllUsesWith(split.getInput());
      split.erase();
    }
    for (auto [norm, weightSplit] : g.distributed)
      distributeNorm(norm, weightSplit);
  }

  /// norm(x) over a row split by features = each rank's sum of squares, summed over the
  /// ranks (one scalar per token), then each rank's columns scaled. The weight is split as
  /// the row; with virtual KV heads only one copy of each real head counts.
  void distributeNorm(RMSNormOp norm, PlacementAttr weightSplit) {
    MLIRContext *ctx = module.getContext();
    ParamOp weight = paramOf(norm.getWeight());
    weight.setPlacementAttr(weightSplit);
    norm.getWeight().setType(withPlacement(norm.getWeight().getType(), weightSplit));
    int64_t copies = weight.getHeadRepeat().value_or(1);
    auto input = typeOf(norm.getInput());
    int64_t features = input.getDimSize(1) / copies;
    OpBuilder builder(norm);
    auto totals = [&](PlacementAttr placement) {
      return RankedTensorType::get({input.getDimSize(0), 1}, input.getElementType(), placement);
    };
    auto sum = SumSquaresOp::create(builder, norm.getLoc(), totals(rules.partial()),
                                    norm.getModuleAttr(), norm.getInput(),
                                    builder.getI64IntegerAttr(copies));
    auto reduce = RedistributeOp::create(builder, norm.getLoc(), totals(rules.replicate()),
                                         sum.getResult(), norm.getModuleAttr());
    auto distributedNorm = RMSNormOp::create(
        builder, norm.getLoc(), norm.getType(), norm.getModuleAttr(), norm.getInput(),
        norm.getWeight(), reduce.getResult(), norm.getEpsilonAttr(), norm.getWeightOffsetAttr(),
        IntegerAttr(), IntegerAttr::get(IntegerType::get(ctx, 64), features));
    distributedNorm->setDiscardableAttrs(norm->getDiscardableAttrDictionary());
    norm.replaceAllUsesWith(distributedNorm.getResult());
    norm.erase();
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
