// tp-propagate-layouts: every value gets a placement (its type's encoding), from the plan's
// module hooks and each op's sharding rule; what each op needs of its operands is recorded
// for tp-insert-redistribute.
#include "tpc/Analysis/Redistribute.h"
#include "tpc/Transforms/LayoutRules.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/VirtualKVHeads.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace tpc::tp {
#define GEN_PASS_DEF_TPPROPAGATELAYOUTS
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

/// What a parameter's placement splits over the ranks: the placement (dims from the front),
/// the dim (-1 where none) and the sizes each rank takes a piece of (one per block of a
/// strided shard).
struct Split {
  PlacementAttr placement;
  int64_t dim = -1;
  SmallVector<int64_t> sizes;
};

Split splitOf(ParamOp param) {
  Split split;
  if (!param.getPlacementAttr())
    return split;
  ArrayRef<int64_t> shape = param.getTensorType().getShape();
  split.placement = normalizePlacement(param.getPlacementAttr(), shape.size());
  if (auto shard = dyn_cast<ShardAttr>(split.placement)) {
    split.dim = shard.getDim();
    split.sizes.push_back(shape[split.dim]);
  } else if (auto strided = dyn_cast<StridedShardAttr>(split.placement)) {
    split.dim = strided.getDim();
    llvm::append_range(split.sizes, strided.getBlocks());
  }
  return split;
}

/// Whether `param` belongs to a linear whose output is only cut into pieces (tp.slice): what
/// mla_kv_a_proj, which keeps it replicated, is for.
bool isLatentProjection(ParamOp param) {
  return allReadsOf(param, [](OpOperand &read) {
    auto linear = dyn_cast<LinearOp>(read.getOwner());
    return linear && !linear.getResult().use_empty() &&
           llvm::all_of(linear.getResult().getUsers(),
                        [](Operation *op) { return isa<SliceOp>(op); });
  });
}

/// Parameter-level checks before any value is placed: strategies tpc cannot run yet, and
/// splits that leave a rank with nothing or experts that do not divide.
LogicalResult checkParams(ModuleOp module, int64_t tp) {
  bool ok = true;
  for (ParamOp param : module.getOps<ParamOp>()) {
    std::optional<StringRef> strategy = param.getStrategy();
    if (strategy == "mla_kv_a_proj" && !isLatentProjection(param)) {
      param.emitError() << "parameter " << param.getSymName()
                        << ": mla_kv_a_proj is for an MLA latent projection (DeepSeek's "
                           "kv_a_proj_with_mqa), whose output is cut into the latent and the "
                           "rope key; this module's output is not";
      ok = false;
      continue;
    }
    auto [placement, dim, pieces] = splitOf(param);
    ArrayRef<int64_t> shape = param.getTensorType().getShape();
    if (strategy == "grouped_gemm" && dim == 0 && shape[0] % tp != 0) {
      param.emitError() << "parameter " << param.getSymName() << " (grouped_gemm): "
                        << shape[0] << " experts (dim 0) do not divide by tp " << tp;
      ok = false;
      continue;
    }
    for (int64_t piece : pieces)
      if (piece < tp) {
        param.emitError() << "parameter " << param.getSymName() << ": dim " << dim
                          << " of size " << piece << " split as " << placement.str()
                          << " over tp " << tp << " leaves some ranks nothing";
        ok = false;
        break;
      }
  }
  return success(ok);
}

/// Whether `linear`'s weight is split on its output features (colwise).
bool isColwise(LinearOp linear) {
  ParamOp param = paramOf(linear.getWeight());
  PlacementAttr p = param ? param.getPlacementAttr() : PlacementAttr();
  return p && normalizePlacement(p, 2) == ShardAttr::get(linear.getContext(), 0);
}

/// The parameter whose value `operand` is, where nothing else uses it (one tp.weight of it,
/// used once); null otherwise.
ParamOp ownedParam(Value operand) {
  ParamOp param = paramOf(operand);
  if (!param || !operand.hasOneUse())
    return {};
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(param, param->getParentOp());
  return uses && std::distance(uses->begin(), uses->end()) == 1 ? param : ParamOp();
}

/// The parameters of `linear` (its weight, and its bias where it has one), each with the
/// value it is used as; empty where some parameter is shared with another op.
SmallVector<std::pair<ParamOp, Value>> ownParams(LinearOp linear) {
  SmallVector<std::pair<ParamOp, Value>> params;
  for (Value operand : {linear.getWeight(), linear.getBias()}) {
    if (!operand)
      continue;
    ParamOp param = ownedParam(operand);
    if (!param)
      return {};
    params.push_back({param, operand});
  }
  return params;
}

/// tp > num_kv_heads, a multiple of it: each real KV head is repeated tp / num_kv_heads times
/// so that the colwise k/v projections split into one head per rank, the head its query
/// heads read (transformers fails mid-forward here).
LogicalResult rewriteVirtualKVHeads(ModuleOp module, int64_t tp) {
  bool ok = true;
  module.walk([&](AttentionOp attention) {
    std::optional<int64_t> repeat = virtualKVRepeat(attention, tp);
    if (!repeat)
      return;
    // The per-head ops between k or v and its projection (rotary, Qwen3's k_norm) widen
    // with it.
    SmallVector<Operation *> between;
    LinearOp k = headProjection(attention.getKey(), &between),
             v = headProjection(attention.getValue(), &between);
    if (!k || !v)
      return;
    if (!isColwise(k) || !isColwise(v))
      return;
    KVHeadWidener widener(*repeat);
    for (LinearOp linear : {k, v}) {
      for (Value operand : {linear.getWeight(), linear.getBias()}) {
        if (operand && !widener.widenParam(operand)) {
          attention.emitError() << getModuleName(attention)
                                << ": virtual KV heads need k_proj and v_proj to own their "
                                   "parameters";
          ok = false;
          return;
        }
      }
      widener.widenValue(linear.getResult(), 1);
    }
    for (Operation *op : between)
      widener.widenValue(op->getResult(0), 1);
    widener.widenAttention(attention, tp);
  });
  return success(ok);
}

/// Query heads tp does not divide, or KV heads that neither divide by tp nor divide it: each
/// rank gets whole heads, rank r the query heads [rH/tp, (r+1)H/tp) (sizes differ by one at
/// most) and exactly the KV heads those read, a KV head shared by two ranks held by both
/// (as virtual KV heads are). Every rank's piece is padded with zero heads to the largest
/// rank's, so the q, k, v and o_proj tensors become tp equal pieces and everything after
/// is the even case; the shard descriptors say which heads each rank loads, and the
/// attention's rank_heads which of its query heads read which KV head. Needs q, k and v
/// colwise and o_proj rowwise: the padded heads must meet o_proj's zero columns, never a
/// gather.
LogicalResult rewriteUnevenHeads(ModuleOp module, int64_t tp) {
  bool ok = true;
  MLIRContext *ctx = module.getContext();
  module.walk([&](AttentionOp attention) {
    int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads();
    int64_t headDim = attention.getHeadDim();
    bool virtualKV = kvHeads < tp && tp % kvHeads == 0;
    if (heads % tp == 0 && (kvHeads % tp == 0 || virtualKV))
      return;
    SmallVector<Operation *> qBetween, kBetween, vBetween;
    LinearOp q = headProjection(attention.getQuery(), &qBetween),
             k = headProjection(attention.getKey(), &kBetween),
             v = headProjection(attention.getValue(), &vBetween);
    SmallVector<LinearOp> projections;
    for (LinearOp p : {q, k, v})
      if (p && isColwise(p))
        projections.push_back(p);
    // Attention runs replicated, with nothing to split, where no projection is colwise or
    // some reaches it through a norm of the whole row (OLMo2's q_norm and k_norm), which
    // needs its row gathered first.
    if (projections.empty() || !q || !k || !v)
      return;
    StringRef module = getModuleName(attention);
    auto fail = [&](const Twine &why) {
      attention.emitError() << module << ": " << heads << " heads and " << kvHeads
                            << " KV heads over tp " << tp
                            << " split unevenly into whole heads per rank, which " << why;
      ok = false;
    };
    if (projections.size() != 3)
      return fail("needs q_proj, k_proj and v_proj all colwise");
    if (attention.getSinks())
      return fail("tpc does not do with attention sinks yet (the sinks would have to be "
                  "split into the same uneven runs of heads); use a tp that divides the heads "
                  "and KV heads, or keep the attention replicated");
    // The attention's output must go, alone, into a rowwise o_proj.
    Value result = attention.getResult();
    auto out = result.hasOneUse() ? dyn_cast<LinearOp>(*result.getUsers().begin()) : LinearOp();
    ParamOp outParam = out ? ownedParam(out.getWeight()) : ParamOp();
    if (!out || out.getInput() != result || !outParam || !outParam.getPlacementAttr() ||
        normalizePlacement(outParam.getPlacementAttr(), 2) != ShardAttr::get(ctx, 1))
      return fail("needs the attention's output to go straight into a rowwise o_proj (the "
                  "padded heads then meet zero columns, never a gather)");
    for (auto chain : {ArrayRef<Operation *>(qBetween), ArrayRef<Operation *>(kBetween),
                       ArrayRef<Operation *>(vBetween)})
      for (Operation *op : chain)
        if (!op->getResult(0).hasOneUse())
          return fail("needs each of q, k and v used by the attention alone");
    for (LinearOp p : {q, k, v})
      if (!p.getResult().hasOneUse() || ownParams(p).empty())
        return fail("needs q_proj, k_proj and v_proj to own their parameters and feed the "
                    "attention alone");
    if (heads < tp)
      return fail("leaves some rank no query head: tp can be at most " +
                  std::to_string(heads));

    // Each rank's heads, and the largest rank's counts.
    int64_t group = heads / kvHeads, most = 0, mostKv = 0;
    SmallVector<int64_t> rankHeads, qRuns, kvRuns;
    for (int64_t r = 0; r < tp; ++r) {
      int64_t first = r * heads / tp, count = (r + 1) * heads / tp - first;
      int64_t firstKv = first / group, kvCount = (first + count - 1) / group - firstKv + 1;
      most = std::max(most, count);
      mostKv = std::max(mostKv, kvCount);
      llvm::append_range(rankHeads, ArrayRef<int64_t>{first, count, firstKv});
      llvm::append_range(qRuns, ArrayRef<int64_t>{first * headDim, count * headDim});
      llvm::append_range(kvRuns, ArrayRef<int64_t>{firstKv * headDim, kvCount * headDim});
    }

    auto widen = [&](Value value, int64_t dim, int64_t size) {
      auto type = typeOf(value);
      SmallVector<int64_t> shape(type.getShape());
      shape[dim] = size;
      value.setType(type.clone(shape));
    };
    // A parameter split on `dim` into `runs`: tp pieces of the largest run's size.
    auto place = [&](ParamOp param, Value use, int64_t dim, ArrayRef<int64_t> runs,
                     int64_t piece) {
      RankedTensorType type = param.getTensorType();
      SmallVector<int64_t> hf(type.getShape());
      param.setShardAttr(ShardDescAttr::get(ctx, dim, hf, {0}, {hf[dim]}, tp, runs));
      SmallVector<int64_t> shape(hf);
      shape[dim] = tp * piece;
      param.setType(type.clone(shape));
      widen(use, dim, tp * piece);
    };
    for (auto [proj, runs, count, chain] :
         {std::tuple{q, ArrayRef<int64_t>(qRuns), most, ArrayRef<Operation *>(qBetween)},
          std::tuple{k, ArrayRef<int64_t>(kvRuns), mostKv, ArrayRef<Operation *>(kBetween)},
          std::tuple{v, ArrayRef<int64_t>(kvRuns), mostKv, ArrayRef<Operation *>(vBetween)}}) {
      for (auto [param, use] : ownParams(proj))
        place(param, use, 0, runs, count * headDim);
      widen(proj.getResult(), 1, tp * count * headDim);
      for (Operation *op : chain)
        widen(op->getResult(0), 1, tp * count * headDim);
    }
    place(outParam, out.getWeight(), 1, qRuns, most * headDim);
    widen(result, 1, tp * most * headDim);
    attention.setNumHeads(tp * most);
    attention.setNumKvHeads(tp * mostKv);
    attention.setRankHeads(rankHeads);
    attention.setKvGroup(group);
  });
  return success(ok);
}

/// Gives every value of a forward a placement from the module hooks and each op's rule.
LogicalResult propagate(func::FuncOp func, LayoutRules &rules, bool sequence) {
  bool ok = true;
  // What each value's consumers see: its placement after any output hook.
  llvm::DenseMap<Value, PlacementAttr> effective;
  // Results of ops whose rule failed: Replicate stands in for a placement that has none.
  llvm::DenseSet<Value> guessed;
  for (BlockArgument arg : func.getArguments()) {
    arg.setType(withPlacement(arg.getType(), rules.replicate()));
    effective[arg] = rules.replicate();
  }
  func.walk([&](Operation *op) {
    if (op == func)
      return;
    StringRef module = getModuleName(op);
    auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
    SmallVector<PlacementAttr> in;
    for (Value operand : op->getOperands())
      in.push_back(effective.lookup(operand) ? effective.lookup(operand)
                                             : rules.replicate());
    // A module's input hook: what comes from outside the module arrives in its layout.
    if (strategy && strategy.getInput() && op->getNumOperands() > 0) {
      Operation *producer = op->getOperand(0).getDefiningOp();
      if (!producer || getModuleName(producer) != module)
        in[0] = normalizePlacement(strategy.getInput(), rankOf(op->getOperand(0)));
    }
    FailureOr<OpLayout> layout;
    {
      // What an op's rule says of a guessed operand follows from the error that made the
      // guess: one diagnostic per cause (rotary's split heads, not then attention's too).
      std::optional<ScopedDiagnosticHandler> consequence;
      if (llvm::any_of(op->getOperands(), [&](Value v) { return guessed.contains(v); }))
        consequence.emplace(op->getContext(), [](Diagnostic &) { return success(); });
      layout = rules.infer(op, in);
    }
    if (failed(layout)) {
      ok = false;
      guessed.insert(op->result_begin(), op->result_end());
      layout = OpLayout{SmallVector<PlacementAttr>(in.size(), rules.replicate()),
                        op->getNumResults() ? rules.replicate() : PlacementAttr()};
    }
    Builder builder(op->getContext());
    if (op->getNumOperands())
      op->setAttr(kOperandLayoutsAttrName,
                  builder.getArrayAttr(SmallVector<Attribute>(layout->operands.begin(),
                                                              layout->operands.end())));
    if (op->getNumResults() != 1 || !layout->result)
      return;
    Value result = op->getResult(0);
    result.setType(withPlacement(result.getType(), layout->result));
    PlacementAttr out = layout->result;
    // A module's output hook applies where the result leaves the module.
    bool leaves = llvm::any_of(result.getUsers(), [&](Operation *user) {
      return getModuleName(user) != module;
    });
    if (strategy && strategy.getOutput() && leaves) {
      out = normalizePlacement(strategy.getOutput(), rankOf(result));
      if (sequence && isa<PartialAttr>(layout->result) && isa<ReplicateAttr>(out))
        out = rules.shard(0); // the reduce becomes a reduce_scatter over tokens
    }
    if (sequence && isa<EmbeddingOp>(op))
      out = rules.shard(0); // the residual stream starts split by tokens
    if (!samePlacement(out, layout->result, rankOf(result)))
      op->setAttr(kOutputLayoutAttrName, out);
    effective[result] = out;
  });
  return success(ok);
}

/// Places every value of `module` for `tp` ranks: tpc's whole rule for which splits work,
/// with an error for each that does not.
LogicalResult placeValues(ModuleOp module, int64_t tp, StringRef sequenceParallel) {
  if (failed(checkParams(module, tp)) || failed(rewriteVirtualKVHeads(module, tp)) ||
      failed(rewriteUnevenHeads(module, tp)))
    return failure();
  bool sequence = sequenceParallel == "on";
  module.walk([&](Operation *op) {
    auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
    if (!strategy || strategy.getName() != "sequence_parallel")
      return;
    if (sequenceParallel == "off") // the fallback runs these norms on whole rows
      op->removeAttr(kStrategyAttrName);
    else
      sequence = true;
  });

  LayoutRules rules(module.getContext(), tp);
  bool ok = true;
  for (auto func : module.getOps<func::FuncOp>())
    ok &= succeeded(propagate(func, rules, sequence));
  // The signature follows the placed values; results become Replicate once
  // tp-insert-redistribute has met what return needs.
  updateFunctionTypes(module);
  return success(ok);
}

/// Past this a list of tp sizes would only grow long.
constexpr int64_t kMostTpListed = 64;

/// The largest tp worth trying: a larger one leaves some rank nothing of the smallest split
/// dim (checkParams).
int64_t largestTpToTry(ModuleOp module) {
  int64_t largest = kMostTpListed;
  for (ParamOp param : module.getOps<ParamOp>())
    for (int64_t size : splitOf(param).sizes)
      largest = std::min(largest, size);
  return largest;
}

/// The tp sizes up to `last` at which placeValues accepts `module` (as it was before
/// placing), tried on copies with their errors silenced: the list cannot disagree with the
/// check.
SmallVector<int64_t> workingTpSizes(ModuleOp module, int64_t last, StringRef sequenceParallel) {
  ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
  SmallVector<int64_t> sizes;
  for (int64_t tp = 1; tp <= last; ++tp) {
    OwningOpRef<ModuleOp> copy = module.clone();
    (*copy)->setAttr(kMeshAttrName, MeshAttr::get(module.getContext(), getPipelineStages(module), tp));
    if (succeeded(placeValues(*copy, tp, sequenceParallel)))
      sizes.push_back(tp);
  }
  return sizes;
}

struct TPPropagateLayoutsPass
    : tpc::tp::impl::TPPropagateLayoutsBase<TPPropagateLayoutsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<int64_t> tp = requireMeshSize(module);
    if (failed(tp))
      return signalPassFailure();
    if (!llvm::is_contained({"auto", "on", "off"}, sequenceParallel)) {
      module.emitError() << "sequence-parallel must be auto, on or off, got '"
                         << sequenceParallel << "'";
      return signalPassFailure();
    }
    // Placing rewrites the module; a failure is answered from the module as it came.
    OwningOpRef<ModuleOp> original = module.clone();
    if (succeeded(placeValues(module, *tp, sequenceParallel)))
      return;
    // Where another tp would work, this one is what cannot be served: say which do.
    int64_t last = largestTpToTry(*original);
    SmallVector<int64_t> sizes = workingTpSizes(*original, last, sequenceParallel);
    if (!sizes.empty()) {
      InFlightDiagnostic note =
          getContext().getDiagEngine().emit(module.getLoc(), DiagnosticSeverity::Note);
      note << "tp sizes "
           << (last == kMostTpListed ? "up to " + std::to_string(last) + " " : "")
           << "that work for this model and plan: ";
      llvm::interleaveComma(sizes, note);
    }
    signalPassFailure();
  }
};

} // namespace
