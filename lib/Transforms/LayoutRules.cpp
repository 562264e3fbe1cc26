// The sharding rule of every tp op (docs/architecture.md). Partial passes through linear
// maps and sums of Partials; anything non-linear, or a Partial meeting a Replicate in a sum,
// needs the reduce first. A matmul's output placement follows from its weight's: sharded
// output features give Shard(-1), a sharded contracted dim gives Partial.
#include "tpc/Transforms/LayoutRules.h"

#include "tpc/Analysis/Redistribute.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace tpc::tp;

namespace {

bool isR(PlacementAttr p) { return isa<ReplicateAttr>(p); }
bool isP(PlacementAttr p) { return isa<PartialAttr>(p); }

/// The dim a Shard places, or -1.
int64_t shardDim(PlacementAttr p) {
  if (auto s = dyn_cast<ShardAttr>(p))
    return s.getDim();
  return -1;
}

InFlightDiagnostic moduleError(Operation *op) {
  InFlightDiagnostic diag = op->emitError();
  StringRef module = getModuleName(op);
  diag << (module.empty() ? op->getName().getStringRef() : module) << ": ";
  return diag;
}

int64_t featuresOf(Value v) { return typeOf(v).getDimSize(1); }

} // namespace

PlacementAttr LayoutRules::replicate() const { return ReplicateAttr::get(context); }
PlacementAttr LayoutRules::partial() const { return PartialAttr::get(context, ReduceKind::sum); }
PlacementAttr LayoutRules::shard(int64_t dim) const { return ShardAttr::get(context, dim); }

bool LayoutRules::wholeHeads(PlacementAttr placement, int64_t features, int64_t headDim) const {
  auto wholeSplit = [&](int64_t size) {
    return !ShapedType::isDynamic(size) && size % headDim == 0 && (size / headDim) % tp == 0;
  };
  if (shardDim(placement) == 1)
    return wholeSplit(features);
  if (auto strided = dyn_cast<StridedShardAttr>(placement))
    return strided.getDim() == 1 && llvm::all_of(strided.getBlocks(), wholeSplit);
  return false;
}

FailureOr<OpLayout> LayoutRules::infer(Operation *op, ArrayRef<PlacementAttr> operands) {
  // Rules compare placements with dims counted from the front.
  SmallVector<PlacementAttr> in;
  for (auto [p, v] : llvm::zip(operands, op->getOperands()))
    in.push_back(normalizePlacement(p, typeOf(v).getRank()));
  if (auto weight = dyn_cast<WeightOp>(op)) {
    auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(op, weight.getParamAttr());
    PlacementAttr placement = param ? param.getPlacementAttr() : PlacementAttr();
    return OpLayout{{}, placement ? normalizePlacement(placement, weight.getType().getRank())
                                  : replicate()};
  }
  if (isa<LinearOp>(op))
    return linear(op, in);
  if (isa<EmbeddingOp>(op))
    return embedding(op, in);
  if (isa<RotaryOp>(op))
    return rotary(op, in);
  if (isa<AttentionOp>(op))
    return attention(op, in);
  if (auto norm = dyn_cast<RMSNormOp>(op); norm && norm.getHeadDim())
    return headNorm(op, in);
  if (isa<L2NormOp>(op))
    return headNorm(op, in);
  if (isa<RouterOp>(op))
    return router(op, in);
  if (isa<ExpertsOp>(op))
    return experts(op, in);
  if (isa<ScaleOp, IdentityOp>(op)) // linear maps of each element: any placement stays
    return OpLayout{{in[0]}, in[0]};
  if (isa<SumSquaresOp>(op))
    return sumSquares(in);
  if (auto norm = dyn_cast<RMSNormOp>(op); norm && norm.getSumSquares())
    return normWithTotals(in[0]);
  if (isa<RMSNormOp>(op)) {
    // Normalizes over the features: a whole row per rank, so replicated or split by tokens.
    PlacementAttr x = shardDim(in[0]) == 0 ? in[0] : replicate();
    return OpLayout{{x, replicate()}, x};
  }
  if (isa<SiluOp, GeluOp, SoftcapOp, AddOp, MulOp>(op))
    return elementwise(op, in);
  if (isa<LastTokenOp>(op)) {
    // A row of its own: features may stay split, a sum stays a sum; tokens must be whole.
    PlacementAttr x = shardDim(in[0]) == 0 ? replicate() : in[0];
    return OpLayout{{x}, x};
  }
  if (isa<SliceOp>(op))
    return slice(op, in);
  if (isa<HeadSliceOp, ConcatHeadsOp>(op))
    return perHead(op, in);
  if (isa<ConcatOp>(op))
    return concat(op, in);
  if (isa<func::ReturnOp>(op))
    return OpLayout{SmallVector<PlacementAttr>(in.size(), replicate()), nullptr};
  // Collectives and reshards carry their placements already.
  OpLayout layout{SmallVector<PlacementAttr>(in), nullptr};
  if (op->getNumResults() == 1)
    layout.result = getPlacement(op->getResult(0));
  return layout;
}

FailureOr<OpLayout> LayoutRules::linear(Operation *op, ArrayRef<PlacementAttr> in) {
  auto linear = cast<LinearOp>(op);
  PlacementAttr x = in[0], w = in[1];
  bool hasBias = static_cast<bool>(linear.getBias());
  OpLayout layout;
  auto finish = [&](PlacementAttr input, PlacementAttr bias, PlacementAttr result) {
    layout.operands = {input, w};
    if (hasBias)
      layout.operands.push_back(bias);
    layout.result = result;
    return layout;
  };
  if (isR(w)) {
    // A replicated weight maps each token on its own: tokens may be split, and without a
    // bias a Partial input stays Partial (a linear map of a sum).
    if (shardDim(x) == 0)
      return finish(x, replicate(), x);
    if (isP(x) && !hasBias)
      return finish(x, replicate(), x);
    return finish(replicate(), replicate(), replicate());
  }
  if (shardDim(w) == 0) // output features: x @ W.T is Shard(-1)
    return finish(replicate(), shard(0), shard(1));
  if (shardDim(w) == 1) // contracted features: each rank's product is a summand; the bias
    return finish(shard(1), replicate(), partial()); // is added once, by rank 0
  if (auto strided = dyn_cast<StridedShardAttr>(w)) {
    auto blocks = strided.getBlocks();
    if (strided.getDim() == 0)
      return finish(replicate(), StridedShardAttr::get(context, 0, blocks),
                    StridedShardAttr::get(context, 1, blocks));
    return finish(StridedShardAttr::get(context, 1, blocks), replicate(), partial());
  }
  return LogicalResult(moduleError(op) << "the weight cannot be " << w.str());
}

FailureOr<OpLayout> LayoutRules::embedding(Operation *op, ArrayRef<PlacementAttr> in) {
  PlacementAttr table = in[1];
  if (isR(table))
    return OpLayout{{replicate(), table}, replicate()};
  if (shardDim(table) == 0) // vocab: ids outside the chunk give zero rows, so a summand
    return OpLayout{{replicate(), table}, partial()};
  if (shardDim(table) == 1)
    return OpLayout{{replicate(), table}, shard(1)};
  return LogicalResult(moduleError(op) << "an embedding table cannot be " << table.str());
}

FailureOr<OpLayout> LayoutRules::rotary(Operation *op, ArrayRef<PlacementAttr> in) {
  auto rotary = cast<RotaryOp>(op);
  PlacementAttr x = in[0];
  if (shardDim(x) == 0) // tokens split: each rank needs its own tokens' positions
    return OpLayout{{x, x}, x};
  if (isR(x) || isP(x)) // a rotation is linear, so a Partial stays Partial
    return OpLayout{{x, replicate()}, x};
  int64_t features = featuresOf(rotary.getInput()), headDim = rotary.getHeadDim();
  if (!wholeHeads(x, features, headDim))
    return LogicalResult(moduleError(op) << "dim 1 of size " << features << " (heads of " << headDim
                                   << ") split as " << x.str() << " over tp " << tp
                                   << " does not give every rank whole heads");
  return OpLayout{{x, replicate()}, x};
}

FailureOr<OpLayout> LayoutRules::attention(Operation *op, ArrayRef<PlacementAttr> in) {
  auto attention = cast<AttentionOp>(op);
  int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads();
  // The sinks (one logit per head) are split with the heads; q, k and v decide.
  bool hasSinks = static_cast<bool>(attention.getSinks());
  ArrayRef<PlacementAttr> qkv = in.take_front(3);
  bool sharded = llvm::any_of(qkv, [](PlacementAttr p) { return !isR(p) && !isP(p); });
  if (!sharded || llvm::any_of(qkv, [](PlacementAttr p) { return shardDim(p) == 0; })) {
    // Replicated heads, or tokens split: every rank needs every key, so gather.
    PlacementAttr r = replicate();
    OpLayout layout{{r, r, r}, r};
    if (hasSinks)
      layout.operands.push_back(r);
    return layout;
  }
  if (heads % tp != 0)
    return LogicalResult(moduleError(op) << "num_heads " << heads << " (q dim 1 of size "
                                   << heads * attention.getHeadDim()
                                   << ") does not divide by tp " << tp);
  if (kvHeads % tp != 0)
    return LogicalResult(moduleError(op)
                   << "num_kv_heads " << kvHeads << " (k and v dim 1 of size "
                   << kvHeads * attention.getHeadDim() << ") does not divide by tp " << tp
                   << (tp % kvHeads == 0
                           ? "; virtual KV heads need k_proj and v_proj sharded colwise"
                           : ", nor does tp divide by it"));
  for (PlacementAttr p : qkv)
    if (p != shard(1) && !isR(p))
      return LogicalResult(moduleError(op) << "q, k and v must be split on whole heads, got "
                                     << p.str());
  // Heads are independent: a replicated operand is sliced to this rank's heads.
  OpLayout layout{{shard(1), shard(1), shard(1)}, shard(1)};
  if (hasSinks)
    layout.operands.push_back(shard(0));
  return layout;
}

FailureOr<OpLayout> LayoutRules::headNorm(Operation *op, ArrayRef<PlacementAttr> in) {
  // Each head is normalized on its own: tokens or whole heads may be split, a sum may not.
  // An RMSNorm's weight (one head's) is replicated; an L2 norm has none.
  auto norm = dyn_cast<RMSNormOp>(op);
  PlacementAttr x = in[0];
  if (isP(x))
    x = replicate();
  int64_t features = featuresOf(op->getOperand(0));
  int64_t headDim = norm ? *norm.getHeadDim() : int64_t(cast<L2NormOp>(op).getHeadDim());
  if (!isR(x) && shardDim(x) != 0 && !wholeHeads(x, features, headDim))
    return LogicalResult(moduleError(op) << "dim 1 of size " << features << " (heads of "
                                         << headDim << ") split as " << x.str() << " over tp "
                                         << tp << " does not give every rank whole heads");
  if (!norm)
    return OpLayout{{x}, x};
  return OpLayout{{x, replicate()}, x};
}

OpLayout LayoutRules::sumSquares(ArrayRef<PlacementAttr> in) {
  // A sum of squares is no linear map: a Partial is summed first. Over columns split by
  // features each rank's sum is a summand.
  PlacementAttr x = isP(in[0]) ? replicate() : in[0];
  if (isR(x) || shardDim(x) == 0)
    return OpLayout{{x}, x};
  return OpLayout{{x}, partial()};
}

OpLayout LayoutRules::normWithTotals(PlacementAttr x) const {
  // The row's totals come whole (replicated, or split by tokens with the row): each rank
  // scales its own columns, with the weight split as they are.
  if (isP(x))
    x = replicate();
  if (isR(x) || shardDim(x) == 0)
    return OpLayout{{x, replicate(), x}, x};
  PlacementAttr weight = shard(0);
  if (auto strided = dyn_cast<StridedShardAttr>(x))
    weight = StridedShardAttr::get(context, 0, strided.getBlocks());
  return OpLayout{{x, weight, replicate()}, x};
}

FailureOr<OpLayout> LayoutRules::router(Operation *op, ArrayRef<PlacementAttr> in) {
  // The softmax and top-k need every expert's logit: a replicated weight, whole rows.
  if (!isR(in[1]))
    return LogicalResult(moduleError(op) << "the router weight must be replicated (the top-k "
                                            "needs every expert's score), got "
                                         << in[1].str());
  PlacementAttr x = shardDim(in[0]) == 0 ? in[0] : replicate();
  OpLayout layout{{x, replicate()}, x};
  if (cast<RouterOp>(op).getBias()) // with the weight: every expert's logit
    layout.operands.push_back(replicate());
  return layout;
}

FailureOr<OpLayout> LayoutRules::experts(Operation *op, ArrayRef<PlacementAttr> in) {
  auto moe = cast<ExpertsOp>(op);
  PlacementAttr gateUp = in[2], down = in[3];
  bool biases = static_cast<bool>(moe.getGateUpBias());
  bool interleaved = moe.getLayout() == "in_out_interleaved";
  bool inOut = moe.getLayout() != "out_in"; // [E, in, out]: x @ W
  int64_t inter = typeOf(moe.getDown()).getDimSize(inOut ? 1 : 2);
  if (isR(gateUp) && isR(down)) {
    // Every expert everywhere: tokens may be split, the routing follows the input.
    PlacementAttr x = shardDim(in[0]) == 0 ? in[0] : replicate();
    OpLayout layout{{x, x, gateUp, down}, x};
    if (biases)
      layout.operands.append({replicate(), replicate()});
    return layout;
  }
  if (shardDim(gateUp) == 0 && shardDim(down) == 0) { // expert parallel: local experts' sum
    // An expert's biases are part of its output, weighted with it: split with the experts.
    OpLayout layout{{replicate(), shard(1), gateUp, down}, partial()};
    if (biases)
      layout.operands.append({shard(0), shard(0)});
    return layout;
  }
  if (interleaved || biases)
    return LogicalResult(moduleError(op)
                         << "experts split as gate_up " << gateUp.str() << " and down "
                         << down.str() << " do not compute: "
                         << (interleaved ? "gate and up are interleaved column by column in gate_up "
                                     "(layout in_out_interleaved), so a split of inter is no "
                                     "packed_colwise split;"
                                   : "the experts have biases, which a split of inter would "
                                     "add on every rank;")
                         << " split the experts' parameters on the expert dim (grouped_gemm), "
                            "or replicate them");
  // A split of inter: gate and up each split alike (packed), down on inter too. In "out_in"
  // inter is gate_up's dim 1 and down's dim 2 (packed_colwise, rowwise); in "in_out" gate_up's
  // dim 2 and down's dim 1 (packed_rowwise, colwise).
  auto packed = dyn_cast<StridedShardAttr>(gateUp);
  if (packed && packed.getDim() == (inOut ? 2 : 1) && packed.getBlocks().size() == 2 &&
      packed.getBlocks()[0] == inter && packed.getBlocks()[1] == inter &&
      shardDim(down) == (inOut ? 1 : 2))
    return OpLayout{{replicate(), replicate(), gateUp, down}, partial()};
  return LogicalResult(moduleError(op)
                       << "experts split as gate_up " << gateUp.str() << " and down "
                       << down.str()
                       << " do not compute: split both on the expert dim (grouped_gemm), or "
                       << (inOut ? "gate_up packed_rowwise with down colwise (layout in_out)"
                                 : "gate_up packed_colwise with down rowwise"));
}

OpLayout LayoutRules::elementwise(Operation *op, ArrayRef<PlacementAttr> in) {
  if (in.size() == 1) { // silu, gelu: not linear, so a Partial must be summed first
    PlacementAttr x = isP(in[0]) ? replicate() : in[0];
    return OpLayout{{x}, x};
  }
  PlacementAttr a = in[0], b = in[1];
  bool isAdd = isa<AddOp>(op);
  if (isP(a) && isP(b)) {
    if (isAdd) // P + P is P: the two sums share one reduce
      return OpLayout{{a, b}, a};
    return OpLayout{{replicate(), replicate()}, replicate()}; // P * P is no sum
  }
  if (isP(a) || isP(b)) {
    if (!isAdd) // P * R and R * P stay Partial
      return OpLayout{{isP(a) ? a : replicate(), isP(b) ? b : replicate()}, partial()};
    // P + R would add R on every rank: reduce first, then as below.
    (isP(a) ? a : b) = replicate();
  }
  // Same placement: as is. A replicated side is sliced to the other's split; two different
  // splits meet in the first one's.
  PlacementAttr target = isR(a) ? b : a;
  return OpLayout{{target, target}, target};
}

OpLayout LayoutRules::slice(Operation *op, ArrayRef<PlacementAttr> in) {
  auto slice = cast<SliceOp>(op);
  PlacementAttr x = in[0];
  int64_t rank = typeOf(slice.getInput()).getRank();
  int64_t dim = normalizeDim(slice.getDim(), rank);
  if (isR(x) || isP(x) || (shardDim(x) >= 0 && shardDim(x) != dim))
    return OpLayout{{x}, x}; // a slice is linear, and leaves other dims' splits alone
  if (auto strided = dyn_cast<StridedShardAttr>(x); strided && strided.getDim() == dim) {
    // Whole blocks of a strided shard are shards of their own: each rank holds its chunk of
    // every block, so cutting blocks apart needs nothing.
    ArrayRef<int64_t> blocks = strided.getBlocks();
    int64_t begin = 0, first = -1, last = -1;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (begin == static_cast<int64_t>(slice.getOffset()))
        first = i;
      begin += blocks[i];
      if (begin == static_cast<int64_t>(slice.getOffset() + slice.getSize()))
        last = i;
    }
    if (first >= 0 && last >= first) {
      if (first == last)
        return OpLayout{{x}, shard(dim)};
      return OpLayout{{x}, StridedShardAttr::get(context, dim, blocks.slice(first, last - first + 1))};
    }
  }
  return OpLayout{{replicate()}, replicate()};
}

FailureOr<OpLayout> LayoutRules::perHead(Operation *op, ArrayRef<PlacementAttr> in) {
  // Each head on its own (a head's columns cut out, or a shared part appended to each head):
  // heads may be split whole, tokens too; a shared part must be whole on every rank.
  auto slice = dyn_cast<HeadSliceOp>(op);
  Value heads = slice ? slice.getInput() : cast<ConcatHeadsOp>(op).getHeads();
  int64_t headDim = slice ? slice.getHeadDim() : cast<ConcatHeadsOp>(op).getHeadDim();
  PlacementAttr x = in[0];
  if (isP(x) && !slice)
    x = replicate(); // a sum beside a shared part that is whole: no longer a sum
  SmallVector<PlacementAttr> operands = {x};
  if (!slice) // the shared part: with the tokens where they are split, else whole
    operands.push_back(shardDim(x) == 0 ? x : replicate());
  if (isR(x) || isP(x) || shardDim(x) == 0)
    return OpLayout{operands, x};
  int64_t features = featuresOf(heads);
  if (shardDim(x) != 1 || !wholeHeads(x, features, headDim))
    return LogicalResult(moduleError(op) << "dim 1 of size " << features << " (heads of "
                                         << headDim << ") split as " << x.str() << " over tp "
                                         << tp << " does not give every rank whole heads");
  return OpLayout{operands, shard(1)};
}

OpLayout LayoutRules::concat(Operation *op, ArrayRef<PlacementAttr> in) {
  auto concat = cast<ConcatOp>(op);
  int64_t rank = cast<RankedTensorType>(concat.getType()).getRank();
  int64_t dim = normalizeDim(concat.getDim(), rank);
  bool same = llvm::all_equal(in);
  if (same && (isR(in[0]) || isP(in[0]) || (shardDim(in[0]) >= 0 && shardDim(in[0]) != dim)))
    return OpLayout{SmallVector<PlacementAttr>(in), in[0]};
  if (same && shardDim(in[0]) == dim) {
    // Pieces split on the joined dim: each rank holds its chunk of each piece.
    SmallVector<int64_t> blocks;
    for (Value v : concat.getInputs())
      blocks.push_back(typeOf(v).getDimSize(dim));
    if (llvm::none_of(blocks, ShapedType::isDynamic))
      return OpLayout{SmallVector<PlacementAttr>(in),
                      StridedShardAttr::get(context, dim, blocks)};
  }
  return OpLayout{SmallVector<PlacementAttr>(in.size(), replicate()), replicate()};
}
