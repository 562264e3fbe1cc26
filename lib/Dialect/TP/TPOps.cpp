// Verifiers of the tp ops. Each message starts with the HF module at fault and says which
// sizes disagree, since the user knows their model by module name, not by SSA value.
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace tpc::tp;

#define GET_OP_CLASSES
#include "TP/TPOps.cpp.inc"

namespace {

/// Starts an error that names the module (when the op has one) and the op.
InFlightDiagnostic moduleError(Operation *op) {
  InFlightDiagnostic diag = op->emitError();
  StringRef module = getModuleName(op);
  if (!module.empty())
    diag << module << " (" << op->getName() << "): ";
  else
    diag << op->getName() << ": ";
  return diag;
}

bool sameSize(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string sizeStr(int64_t size) {
  return ShapedType::isDynamic(size) ? "?" : std::to_string(size);
}

std::string shapeStr(ShapedType type) {
  std::string s;
  llvm::ListSeparator sep("x");
  for (int64_t d : type.getShape())
    s += StringRef(sep).str() + sizeStr(d);
  return type.getRank() == 0 ? "scalar" : s;
}

LogicalResult expectRank(Operation *op, Value v, StringRef what, int64_t rank) {
  if (typeOf(v).getRank() == rank)
    return success();
  return moduleError(op) << what << " must have rank " << rank << ", got "
                         << shapeStr(typeOf(v));
}

/// Activations and the result share one element type.
LogicalResult expectElementType(Operation *op, Value v, StringRef what, Type expected) {
  Type actual = typeOf(v).getElementType();
  if (actual == expected)
    return success();
  return moduleError(op) << what << " has element type " << actual << ", expected " << expected;
}

/// The result of a [seq, features] op: rank 2, the input's seq, and `features`.
LogicalResult expectResult(Operation *op, Value input, int64_t features) {
  RankedTensorType in = typeOf(input), out = typeOf(op->getResult(0));
  if (failed(expectRank(op, op->getResult(0), "the result", 2)))
    return failure();
  if (!sameSize(in.getDimSize(0), out.getDimSize(0)) || !sameSize(features, out.getDimSize(1)))
    return moduleError(op) << "the result should be " << sizeStr(in.getDimSize(0)) << "x"
                           << sizeStr(features) << ", got " << shapeStr(out);
  return expectElementType(op, op->getResult(0), "the result", in.getElementType());
}

/// Elementwise ops: every operand and the result have one type (dynamic dims are wildcards).
LogicalResult verifyElementwise(Operation *op) {
  Value first = op->getOperand(0);
  for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults())) {
    RankedTensorType a = typeOf(first), b = typeOf(v);
    bool same = a.getRank() == b.getRank() && a.getElementType() == b.getElementType();
    for (int64_t i = 0; same && i < a.getRank(); ++i)
      same = sameSize(a.getDimSize(i), b.getDimSize(i));
    if (!same)
      return moduleError(op) << "elementwise operands and result must match, got "
                             << a << " and " << b;
  }
  return success();
}

/// A dim attribute must name a dim of the tensor.
LogicalResult expectDim(Operation *op, Value v, int64_t dim) {
  if (normalizeDim(dim, typeOf(v).getRank()) >= 0)
    return success();
  return moduleError(op) << "dim " << dim << " is out of range for " << shapeStr(typeOf(v));
}

} // namespace

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

WeightType ParamOp::getWeightType() {
  if (std::optional<WeightType> storage = getStorage())
    return *storage;
  return weightTypeOf(getTensorType().getElementType()).value_or(WeightType::f32);
}

LogicalResult ParamOp::verify() {
  if (auto stages = getStagesAttr()) {
    ArrayRef<int64_t> list = stages.asArrayRef();
    if (list.empty() || list.front() < 0 ||
        llvm::any_of(llvm::zip(list.drop_back(), list.drop_front()),
                     [](auto pair) { return std::get<0>(pair) >= std::get<1>(pair); }))
      return emitError() << "parameter " << getSymName()
                         << ": stages must list stages (>= 0) once each, sorted, got "
                         << stages;
  }
  // Once partitioned (a shard descriptor is set) the type is local and the placement global.
  if (auto placement = getPlacementAttr(); placement && !getShardAttr())
    return placement.verifyFor(getTensorType().getShape(), [&] {
      return emitError() << "parameter " << getSymName() << ": ";
    });
  return success();
}

LogicalResult WeightOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto param = symbols.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitError() << "no tp.param named " << getParamAttr();
  RankedTensorType declared = param.getTensorType(), read = getType();
  if (declared.getShape() != read.getShape() ||
      declared.getElementType() != read.getElementType())
    return emitError() << "parameter " << param.getSymName() << " is " << declared
                       << ", but tp.weight reads it as " << read;
  PlacementAttr placement = getPlacement(read);
  PlacementAttr expected = param.getPlacementAttr();
  if (!expected)
    expected = ReplicateAttr::get(getContext());
  if (placement && !samePlacement(placement, expected, read.getRank()))
    return emitError() << "parameter " << param.getSymName() << " is placed " << expected.str()
                       << ", but tp.weight reads it as " << placement.str();
  return success();
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (failed(expectRank(*this, getTable(), "the table", 2)))
    return failure();
  RankedTensorType table = typeOf(getTable()), ids = typeOf(getIds());
  RankedTensorType out = typeOf(getResult());
  if (out.getRank() != 2 || !sameSize(out.getDimSize(0), ids.getDimSize(0)) ||
      !sameSize(out.getDimSize(1), table.getDimSize(1)))
    return moduleError(*this) << "the result should be " << sizeStr(ids.getDimSize(0)) << "x"
                              << sizeStr(table.getDimSize(1)) << " (ids x embedding dim), got "
                              << shapeStr(out);
  return expectElementType(*this, getResult(), "the result", table.getElementType());
}

LogicalResult L2NormOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)))
    return failure();
  int64_t hidden = typeOf(getInput()).getDimSize(1);
  if (!ShapedType::isDynamic(hidden) && hidden % int64_t(getHeadDim()) != 0)
    return moduleError(*this) << "the input has " << hidden
                              << " features, not a whole number of heads of head_dim "
                              << getHeadDim();
  if (getEpsilon().convertToDouble() <= 0)
    return moduleError(*this) << "epsilon must be positive";
  return expectResult(*this, getInput(), hidden);
}

LogicalResult RMSNormOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)) ||
      failed(expectRank(*this, getWeight(), "the weight", 1)))
    return failure();
  int64_t hidden = typeOf(getInput()).getDimSize(1);
  int64_t weight = typeOf(getWeight()).getDimSize(0);
  if (std::optional<int64_t> headDim = getHeadDim()) {
    if (!sameSize(weight, *headDim))
      return moduleError(*this) << "the weight has " << sizeStr(weight)
                                << " elements, but head_dim is " << *headDim;
    if (!ShapedType::isDynamic(hidden) && hidden % *headDim != 0)
      return moduleError(*this) << "the input has " << hidden
                                << " features, not a whole number of heads of head_dim "
                                << *headDim;
  } else if (!sameSize(hidden, weight)) {
    return moduleError(*this) << "the weight has " << sizeStr(weight)
                              << " elements, but the input has " << sizeStr(hidden)
                              << " features";
  }
  if (getEpsilon().convertToDouble() <= 0)
    return moduleError(*this) << "epsilon must be positive";
  if (Value totals = getSumSquares()) {
    if (getHeadDim())
      return moduleError(*this) << "a per-head norm (head_dim) takes no sum_squares";
    if (!getFeatures())
      return moduleError(*this) << "a norm given sum_squares needs the row's width as `features`";
    if (failed(expectRank(*this, totals, "sum_squares", 2)))
      return failure();
    RankedTensorType t = typeOf(totals);
    if (!sameSize(t.getDimSize(0), typeOf(getInput()).getDimSize(0)) ||
        !sameSize(t.getDimSize(1), 1))
      return moduleError(*this) << "sum_squares should be " << sizeStr(typeOf(getInput()).getDimSize(0))
                                << "x1, got " << shapeStr(t);
  } else if (getFeatures()) {
    return moduleError(*this) << "`features` is the width of a row split by features: it "
                                 "needs sum_squares";
  }
  return expectResult(*this, getInput(), hidden);
}

LogicalResult SumSquaresOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)))
    return failure();
  return expectResult(*this, getInput(), 1);
}

LogicalResult LinearOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)) ||
      failed(expectRank(*this, getWeight(), "the weight", 2)))
    return failure();
  RankedTensorType in = typeOf(getInput()), weight = typeOf(getWeight());
  if (!sameSize(weight.getDimSize(1), in.getDimSize(1)))
    return moduleError(*this) << "the weight is " << shapeStr(weight) << " [out x in] and expects "
                              << sizeStr(weight.getDimSize(1))
                              << " input features, but the input has "
                              << sizeStr(in.getDimSize(1));
  if (failed(expectElementType(*this, getWeight(), "the weight", in.getElementType())))
    return failure();
  if (Value bias = getBias()) {
    if (failed(expectRank(*this, bias, "the bias", 1)))
      return failure();
    if (!sameSize(typeOf(bias).getDimSize(0), weight.getDimSize(0)))
      return moduleError(*this) << "the bias has " << sizeStr(typeOf(bias).getDimSize(0))
                                << " elements, but the weight has "
                                << sizeStr(weight.getDimSize(0)) << " output features";
  }
  return expectResult(*this, getInput(), weight.getDimSize(0));
}

LogicalResult RotaryOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)))
    return failure();
  int64_t headDim = getHeadDim(), features = typeOf(getInput()).getDimSize(1);
  int64_t rotated = headDim - getUnrotated().value_or(0);
  if (rotated <= 0)
    return moduleError(*this) << "unrotated " << *getUnrotated()
                              << " leaves nothing of head_dim " << headDim << " to rotate";
  if (rotated % 2 != 0) {
    if (!getUnrotated())
      return moduleError(*this) << "head_dim " << headDim << " must be even to rotate halves";
    return moduleError(*this) << "the rotated part of each head, head_dim " << headDim
                              << " - unrotated " << *getUnrotated() << ", must be even";
  }
  if (!ShapedType::isDynamic(features) && features % headDim != 0)
    return moduleError(*this) << "the input has " << features
                              << " features, not a whole number of heads of head_dim "
                              << headDim;
  if (!sameSize(typeOf(getPositions()).getDimSize(0), typeOf(getInput()).getDimSize(0)))
    return moduleError(*this) << "positions has " << sizeStr(typeOf(getPositions()).getDimSize(0))
                              << " entries, but the input has "
                              << sizeStr(typeOf(getInput()).getDimSize(0)) << " tokens";
  if (getTheta().convertToDouble() <= 0)
    return moduleError(*this) << "theta must be positive";
  if (std::optional<APFloat> scaling = getScaling();
      scaling && !(scaling->convertToDouble() > 0 && scaling->isFinite()))
    return moduleError(*this) << "scaling must be a positive number, got "
                              << scaling->convertToDouble();
  if (std::optional<ArrayRef<double>> invFreq = getInvFreq();
      invFreq && static_cast<int64_t>(invFreq->size()) != rotated / 2)
    return moduleError(*this) << "inv_freq has " << invFreq->size() << " frequencies, but "
                              << (getUnrotated() ? "the rotated part " : "head_dim ") << rotated
                              << " needs " << rotated / 2;
  return expectResult(*this, getInput(), features);
}

LogicalResult AttentionOp::verify() {
  for (auto [v, what] : {std::pair{getQuery(), "q"}, {getKey(), "k"}, {getValue(), "v"}})
    if (failed(expectRank(*this, v, what, 2)) ||
        failed(expectElementType(*this, v, what, typeOf(getQuery()).getElementType())))
      return failure();
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(), headDim = getHeadDim();
  int64_t valueHeadDim = getValueHeadDim().value_or(headDim);
  if (getRankHeads().has_value() != getKvGroup().has_value())
    return moduleError(*this) << "rank_heads and kv_group come together";
  if (std::optional<ArrayRef<int64_t>> ranks = getRankHeads()) {
    // Uneven heads: the map from query to KV heads is explicit.
    if (ranks->empty() || ranks->size() % 3 != 0)
      return moduleError(*this) << "rank_heads holds a first query head, a count and a first "
                                   "KV head per rank, got "
                                << ranks->size() << " numbers";
  } else if (heads % kvHeads != 0)
    return moduleError(*this) << "num_heads " << heads << " is not a multiple of num_kv_heads "
                              << kvHeads;
  auto expectFeatures = [&](Value v, StringRef what, int64_t n, StringRef count,
                            int64_t width, StringRef widthName) -> LogicalResult {
    int64_t features = typeOf(v).getDimSize(1);
    if (sameSize(features, n * width))
      return success();
    return moduleError(*this) << what << " has " << sizeStr(features) << " features, but "
                              << count << " " << n << " x " << widthName << " " << width
                              << " = " << n * width;
  };
  StringRef valueWidthName = getValueHeadDim() ? "value_head_dim" : "head_dim";
  if (failed(expectFeatures(getQuery(), "q", heads, "num_heads", headDim, "head_dim")) ||
      failed(expectFeatures(getKey(), "k", kvHeads, "num_kv_heads", headDim, "head_dim")) ||
      failed(expectFeatures(getValue(), "v", kvHeads, "num_kv_heads", valueHeadDim,
                            valueWidthName)))
    return failure();
  int64_t seq = typeOf(getQuery()).getDimSize(0);
  for (Value v : {getKey(), getValue()})
    if (!sameSize(typeOf(v).getDimSize(0), seq))
      return moduleError(*this) << "q, k and v must have the same number of tokens, got "
                                << sizeStr(seq) << " and " << sizeStr(typeOf(v).getDimSize(0));
  if (std::optional<APFloat> softcap = getSoftcap(); softcap && softcap->convertToDouble() <= 0)
    return moduleError(*this) << "softcap must be positive";
  if (getChunkSize() && getSlidingWindow())
    return moduleError(*this) << "chunk_size and sliding_window do not combine (a layer is "
                                 "chunked or slides)";
  if (getTemperatureFloor().has_value() != getTemperatureScale().has_value())
    return moduleError(*this) << "temperature_floor and temperature_scale come together";
  if (std::optional<APFloat> floor = getTemperatureFloor(); floor && floor->convertToDouble() <= 0)
    return moduleError(*this) << "temperature_floor must be positive";
  if (Value sinks = getSinks()) {
    if (failed(expectRank(*this, sinks, "sinks", 1)))
      return failure();
    if (!sameSize(typeOf(sinks).getDimSize(0), heads))
      return moduleError(*this) << "sinks has " << sizeStr(typeOf(sinks).getDimSize(0))
                                << " elements, but num_heads is " << heads;
  }
  return expectResult(*this, getQuery(), heads * valueHeadDim);
}

LogicalResult HeadSliceOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)))
    return failure();
  int64_t headDim = getHeadDim(), features = typeOf(getInput()).getDimSize(1);
  if (!ShapedType::isDynamic(features) && features % headDim != 0)
    return moduleError(*this) << "the input has " << features
                              << " features, not a whole number of heads of head_dim " << headDim;
  if (static_cast<int64_t>(getOffset() + getSize()) > headDim)
    return moduleError(*this) << "columns [" << getOffset() << ", " << getOffset() + getSize()
                              << ") are not inside a head of head_dim " << headDim;
  int64_t heads = ShapedType::isDynamic(features) ? features : features / headDim;
  return expectResult(*this, getInput(),
                      ShapedType::isDynamic(heads) ? heads : heads * int64_t(getSize()));
}

LogicalResult ConcatHeadsOp::verify() {
  if (failed(expectRank(*this, getHeads(), "the heads", 2)) ||
      failed(expectRank(*this, getShared(), "the shared part", 2)))
    return failure();
  int64_t headDim = getHeadDim(), features = typeOf(getHeads()).getDimSize(1);
  int64_t shared = typeOf(getShared()).getDimSize(1);
  if (!ShapedType::isDynamic(features) && features % headDim != 0)
    return moduleError(*this) << "the heads have " << features
                              << " features, not a whole number of heads of head_dim " << headDim;
  if (!sameSize(typeOf(getShared()).getDimSize(0), typeOf(getHeads()).getDimSize(0)))
    return moduleError(*this) << "the heads and the shared part must have the same tokens";
  if (ShapedType::isDynamic(features) || ShapedType::isDynamic(shared))
    return expectResult(*this, getHeads(), ShapedType::kDynamic);
  return expectResult(*this, getHeads(), features / headDim * (headDim + shared));
}

LogicalResult SiluOp::verify() { return verifyElementwise(*this); }

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return moduleError(*this) << "approximate must be \"none\" or \"tanh\", got \""
                              << getApproximate() << "\"";
  return verifyElementwise(*this);
}

LogicalResult ScaleOp::verify() { return verifyElementwise(*this); }
LogicalResult IdentityOp::verify() { return verifyElementwise(*this); }

LogicalResult SoftcapOp::verify() {
  if (getCap().convertToDouble() <= 0)
    return moduleError(*this) << "cap must be positive";
  return verifyElementwise(*this);
}

LogicalResult RouterOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)) ||
      failed(expectRank(*this, getWeight(), "the weight", 2)))
    return failure();
  RankedTensorType in = typeOf(getInput()), weight = typeOf(getWeight());
  if (!sameSize(weight.getDimSize(1), in.getDimSize(1)))
    return moduleError(*this) << "the weight is " << shapeStr(weight)
                              << " [experts x hidden], but the input has "
                              << sizeStr(in.getDimSize(1)) << " features";
  int64_t experts = weight.getDimSize(0);
  if (!ShapedType::isDynamic(experts) && static_cast<int64_t>(getTopK()) > experts)
    return moduleError(*this) << "top_k " << getTopK() << " exceeds the " << experts
                              << " experts";
  if (getGroups().has_value() != getTopGroups().has_value())
    return moduleError(*this) << "groups and top_groups come together";
  if (std::optional<int64_t> groups = getGroups()) {
    if (!ShapedType::isDynamic(experts) && experts % *groups != 0)
      return moduleError(*this) << "the " << experts << " experts do not split into " << *groups
                                << " equal groups";
    if (*getTopGroups() > *groups)
      return moduleError(*this) << "top_groups " << *getTopGroups() << " exceeds the "
                                << *groups << " groups";
    if (!ShapedType::isDynamic(experts) &&
        static_cast<int64_t>(getTopK()) > *getTopGroups() * (experts / *groups))
      return moduleError(*this) << "top_k " << getTopK() << " exceeds the "
                                << *getTopGroups() * (experts / *groups)
                                << " experts of the top_groups";
  }
  if (std::optional<APFloat> scale = getScale(); scale && !(scale->convertToDouble() > 0))
    return moduleError(*this) << "scale must be positive";
  if (getSigmoid() && (getSoftmaxAfterTopK() || getGroups() || getScale() || getNormalize()))
    return moduleError(*this) << "a sigmoid router (Llama 4) takes no softmax_after_top_k, "
                                 "groups, scale or normalize";
  if (Value bias = getBias()) {
    if (failed(expectRank(*this, bias, "the bias", 1)))
      return failure();
    if (!sameSize(typeOf(bias).getDimSize(0), experts))
      return moduleError(*this) << "the bias has " << sizeStr(typeOf(bias).getDimSize(0))
                                << " elements, but the weight has " << sizeStr(experts)
                                << " experts";
  }
  return expectResult(*this, getInput(), experts);
}

LogicalResult ExpertsOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)) ||
      failed(expectRank(*this, getRouting(), "the routing weights", 2)) ||
      failed(expectRank(*this, getGateUp(), "gate_up", 3)) ||
      failed(expectRank(*this, getDown(), "down", 3)))
    return failure();
  StringRef activation = getActivation();
  if (activation != "silu" && activation != "gelu_tanh" && activation != "clamped_swiglu")
    return moduleError(*this) << "activation must be \"silu\", \"gelu_tanh\" or "
                                 "\"clamped_swiglu\", got \""
                              << activation << "\"";
  bool clamped = activation == "clamped_swiglu";
  if (clamped != (getAlpha() && getLimit()) || (!clamped && (getAlpha() || getLimit())))
    return moduleError(*this) << "alpha and limit come with activation \"clamped_swiglu\", and "
                                 "it needs both";
  if (clamped && !(getAlpha()->convertToDouble() > 0 && getLimit()->convertToDouble() > 0))
    return moduleError(*this) << "alpha and limit must be positive";
  if (getLayout() != "out_in" && getLayout() != "in_out_interleaved" && getLayout() != "in_out")
    return moduleError(*this) << "layout must be \"out_in\", \"in_out\" or "
                                 "\"in_out_interleaved\", got \""
                              << getLayout() << "\"";
  bool inOut = getLayout() != "out_in";
  RankedTensorType x = typeOf(getInput()), gateUp = typeOf(getGateUp()),
                   down = typeOf(getDown());
  // In "out_in" terms: gate_up [E, 2 * inter, hidden], down [E, hidden, inter].
  auto outIn = [&](RankedTensorType t) {
    return inOut ? RankedTensorType::get({t.getDimSize(0), t.getDimSize(2), t.getDimSize(1)},
                                         t.getElementType())
                 : t;
  };
  RankedTensorType given = gateUp, givenDown = down;
  gateUp = outIn(gateUp);
  down = outIn(down);
  int64_t experts = gateUp.getDimSize(0), hidden = x.getDimSize(1);
  int64_t inter = down.getDimSize(2);
  if (bool(getGateUpBias()) != bool(getDownBias()))
    return moduleError(*this) << "gate_up_bias and down_bias come together";
  if (Value bias = getGateUpBias()) {
    if (failed(expectRank(*this, bias, "gate_up_bias", 2)) ||
        failed(expectRank(*this, getDownBias(), "down_bias", 2)))
      return failure();
    RankedTensorType gb = typeOf(bias), db = typeOf(getDownBias());
    if (!sameSize(gb.getDimSize(0), experts) || !sameSize(gb.getDimSize(1), gateUp.getDimSize(1)) ||
        !sameSize(db.getDimSize(0), experts) || !sameSize(db.getDimSize(1), hidden))
      return moduleError(*this) << "gate_up_bias " << shapeStr(gb) << " and down_bias "
                                << shapeStr(db) << " do not fit gate_up " << shapeStr(given)
                                << " and down " << shapeStr(givenDown);
  }
  if (!sameSize(down.getDimSize(0), experts) ||
      !sameSize(typeOf(getRouting()).getDimSize(1), experts))
    return moduleError(*this) << "gate_up has " << sizeStr(experts) << " experts, down "
                              << sizeStr(down.getDimSize(0)) << " and the routing weights "
                              << sizeStr(typeOf(getRouting()).getDimSize(1));
  if (!sameSize(gateUp.getDimSize(2), hidden) || !sameSize(down.getDimSize(1), hidden))
    return moduleError(*this) << "gate_up " << shapeStr(given) << " and down "
                              << shapeStr(givenDown) << " do not fit an input of "
                              << sizeStr(hidden) << " features";
  if (!ShapedType::isDynamic(inter) && !sameSize(gateUp.getDimSize(1), 2 * inter))
    return moduleError(*this) << "gate_up " << shapeStr(given) << " must hold 2 x " << inter
                              << (inOut ? " columns" : " rows") << ", the inter size of down "
                              << shapeStr(givenDown);
  if (!sameSize(typeOf(getRouting()).getDimSize(0), x.getDimSize(0)))
    return moduleError(*this) << "the routing weights and the input differ in tokens";
  return expectResult(*this, getInput(), hidden);
}

LogicalResult MulOp::verify() { return verifyElementwise(*this); }
LogicalResult AddOp::verify() { return verifyElementwise(*this); }

LogicalResult LastTokenOp::verify() {
  if (failed(expectRank(*this, getInput(), "the input", 2)))
    return failure();
  RankedTensorType in = typeOf(getInput()), out = typeOf(getResult());
  if (out.getRank() != 2 || out.getDimSize(0) != 1 ||
      !sameSize(out.getDimSize(1), in.getDimSize(1)) ||
      out.getElementType() != in.getElementType())
    return moduleError(*this) << "the result should be 1x" << sizeStr(in.getDimSize(1))
                              << ", got " << shapeStr(out);
  return success();
}

LogicalResult SliceOp::verify() {
  if (failed(expectDim(*this, getInput(), getDim())))
    return failure();
  RankedTensorType in = typeOf(getInput()), out = typeOf(getResult());
  int64_t dim = normalizeDim(getDim(), in.getRank());
  int64_t size = in.getDimSize(dim);
  if (!ShapedType::isDynamic(size) && getOffset() + getSize() > size)
    return moduleError(*this) << "slice [" << getOffset() << ", " << getOffset() + getSize()
                              << ") of dim " << getDim() << " runs past its size " << size;
  SmallVector<int64_t> expected(in.getShape());
  expected[dim] = getSize();
  if (out.getShape() != ArrayRef<int64_t>(expected) ||
      out.getElementType() != in.getElementType())
    return moduleError(*this) << "the result should be " << shapeStr(in.clone(expected))
                              << ", got " << shapeStr(out);
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return moduleError(*this) << "needs at least one input";
  RankedTensorType first = typeOf(getInputs().front());
  if (failed(expectDim(*this, getInputs().front(), getDim())))
    return failure();
  int64_t dim = normalizeDim(getDim(), first.getRank());
  SmallVector<int64_t> expected(first.getShape());
  expected[dim] = 0;
  for (Value v : getInputs()) {
    RankedTensorType t = typeOf(v);
    if (t.getRank() != first.getRank() || t.getElementType() != first.getElementType())
      return moduleError(*this) << "inputs must share rank and element type, got " << first
                                << " and " << t;
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != dim && !sameSize(t.getDimSize(i), first.getDimSize(i)))
        return moduleError(*this) << "inputs differ outside dim " << getDim() << ": "
                                  << shapeStr(first) << " and " << shapeStr(t);
    expected[dim] = ShapedType::isDynamic(expected[dim]) || t.isDynamicDim(dim)
                        ? ShapedType::kDynamic
                        : expected[dim] + t.getDimSize(dim);
  }
  RankedTensorType out = typeOf(getResult());
  bool ok = out.getRank() == first.getRank();
  for (int64_t i = 0; ok && i < out.getRank(); ++i)
    ok = sameSize(out.getDimSize(i), expected[i]);
  if (!ok)
    return moduleError(*this) << "the result should be " << shapeStr(first.clone(expected))
                              << ", got " << shapeStr(out);
  return success();
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

/// Redistributions and local reshards carry their placements as type encodings.
static LogicalResult verifyPlacedPair(Operation *op, bool sameShape) {
  RankedTensorType in = typeOf(op->getOperand(0)), out = typeOf(op->getResult(0));
  PlacementAttr src = getPlacement(in), dst = getPlacement(out);
  if (!src || !dst)
    return moduleError(op) << "the operand and result types must carry placements, got " << in
                           << " -> " << out;
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank() ||
      (sameShape && in.getShape() != out.getShape()))
    return moduleError(op) << "a change of placement keeps the "
                           << (sameShape ? "shape" : "rank and element type") << ", got "
                           << in << " -> " << out;
  // Only a redistribution is sure to see global shapes; after tp-partition they are local.
  if (sameShape)
    for (PlacementAttr placement : {src, dst})
      if (failed(placement.verifyFor(in.getShape(), [&] { return moduleError(op); })))
        return failure();
  return success();
}

PlacementAttr RedistributeOp::getSrc() { return getPlacement(getInput()); }
PlacementAttr RedistributeOp::getDst() { return getPlacement(getResult()); }

LogicalResult TransferOp::verify() {
  if (getFrom() < 0 || getTo() < 0 || getFrom() == getTo())
    return emitOpError() << "sends from stage " << getFrom() << " to stage " << getTo()
                         << "; a transfer joins two different stages";
  if (auto module = (*this)->getParentOfType<ModuleOp>()) {
    int64_t stages = getPipelineStages(module);
    if (module->hasAttr(kMeshAttrName) && std::max(getFrom(), getTo()) >= stages)
      return emitOpError() << "sends from stage " << getFrom() << " to stage " << getTo()
                           << ", but the mesh has " << stages << " stage"
                           << (stages == 1 ? "" : "s");
  }
  if (!getArgmaxIfGreedy())
    return success();
  // What the runtime sends in its place is one id a row: only the forward's logits qualify.
  RankedTensorType type = typeOf(getInput());
  Value result = getResult();
  if (type.getRank() != 2 || !result.hasOneUse() ||
      result.getUses().begin()->getOwner()->getName().getStringRef() != "func.return")
    return moduleError(*this) << "argmax_if_greedy needs a transfer of a 2-D tensor (the "
                                 "logits) that the forward returns alone, got "
                              << type;
  return success();
}

LogicalResult RedistributeOp::verify() { return verifyPlacedPair(*this, /*sameShape=*/true); }

OpFoldResult RedistributeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult LocalReshardOp::verify() {
  if (failed(verifyPlacedPair(*this, /*sameShape=*/false)))
    return failure();
  PlacementAttr src = getPlacement(getInput()), dst = getPlacement(getResult());
  bool fromReplicate = isa<ReplicateAttr>(src) && !isa<ReplicateAttr>(dst);
  bool shardToPartial = isa<ShardAttr, StridedShardAttr>(src) && isa<PartialAttr>(dst);
  if (!fromReplicate && !shardToPartial)
    return moduleError(*this) << src.str() << " -> " << dst.str()
                              << " needs communication; use tp.redistribute";
  return success();
}

LogicalResult AllReduceOp::verify() {
  RankedTensorType a = typeOf(getInput()), b = typeOf(getResult());
  if (a.getShape() != b.getShape() || a.getElementType() != b.getElementType())
    return moduleError(*this) << "the sum keeps the shape, got " << a << " -> " << b;
  return success();
}

/// all_gather and reduce_scatter change the size of one dim only.
static LogicalResult verifyResizesOneDim(Operation *op, int64_t dim) {
  Value in = op->getOperand(0), out = op->getResult(0);
  if (failed(expectDim(op, in, dim)))
    return failure();
  RankedTensorType a = typeOf(in), b = typeOf(out);
  int64_t d = normalizeDim(dim, a.getRank());
  bool ok = a.getRank() == b.getRank() && a.getElementType() == b.getElementType();
  for (int64_t i = 0; ok && i < a.getRank(); ++i)
    ok = i == d || sameSize(a.getDimSize(i), b.getDimSize(i));
  if (!ok)
    return moduleError(op) << "only dim " << dim << " may change size, got " << a << " -> " << b;
  return success();
}

LogicalResult AllGatherOp::verify() {
  if (failed(verifyResizesOneDim(*this, getDim())))
    return failure();
  if (!getArgmaxIfGreedy())
    return success();
  // What the runtime returns in its place is one id a row: only the forward's logits qualify.
  RankedTensorType type = typeOf(getInput());
  if (type.getRank() != 2 || normalizeDim(getDim(), 2) != 1)
    return moduleError(*this) << "argmax_if_greedy needs a gather of the columns of a 2-D "
                                 "tensor (the logits), got dim "
                              << getDim() << " of " << type;
  // Returned, or sent to the first pipeline stage by a transfer marked alike.
  Value result = getResult();
  Operation *user = result.hasOneUse() ? result.getUses().begin()->getOwner() : nullptr;
  auto transfer = dyn_cast_or_null<TransferOp>(user);
  if (!user || (user->getName().getStringRef() != "func.return" &&
                !(transfer && transfer.getArgmaxIfGreedy())))
    return moduleError(*this) << "argmax_if_greedy needs the gathered logits to be used by the "
                                 "forward's return alone (or by a transfer marked alike)";
  return success();
}
LogicalResult ReduceScatterOp::verify() { return verifyResizesOneDim(*this, getDim()); }

LogicalResult AllToAllOp::verify() {
  if (failed(expectDim(*this, getInput(), getSplitDim())) ||
      failed(expectDim(*this, getInput(), getConcatDim())))
    return failure();
  RankedTensorType a = typeOf(getInput()), b = typeOf(getResult());
  if (normalizeDim(getSplitDim(), a.getRank()) == normalizeDim(getConcatDim(), a.getRank()))
    return moduleError(*this) << "split_dim and concat_dim must differ";
  if (a.getRank() != b.getRank() || a.getElementType() != b.getElementType())
    return moduleError(*this) << "the result must keep rank and element type, got " << a
                              << " -> " << b;
  return success();
}

//===----------------------------------------------------------------------===//
// tp.fused
//===----------------------------------------------------------------------===//

static bool isElementwiseMember(Operation *op) {
  return isa<SiluOp, GeluOp, ScaleOp, SoftcapOp, AddOp, MulOp>(op);
}

LogicalResult FusedOp::verify() {
  auto yield = dyn_cast<YieldOp>(getBlock().getTerminator());
  if (!yield)
    return emitOpError() << "body must end in tp.yield";
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getValues().getTypes()
                         << ", but its results are " << getResultTypes();
  SmallVector<Operation *> members;
  for (Operation &op : getMembers())
    members.push_back(&op);
  if (members.empty())
    return emitOpError() << "has an empty body";
  auto count = [&](auto isA) { return llvm::count_if(members, isA); };
  FusedKind kind = getKind();
  StringRef name = stringifyFusedKind(kind);
  switch (kind) {
  case FusedKind::elementwise:
  case FusedKind::norm: {
    bool norm = kind == FusedKind::norm;
    size_t chain = members.size() - (norm ? 1 : 0);
    if (size_t(count(isElementwiseMember)) != chain || chain == 0 ||
        (norm && !isa<RMSNormOp>(members.back())))
      return emitOpError() << "'" << name << "' holds "
                           << (norm ? "an elementwise chain, then an rms_norm"
                                    : "elementwise ops only");
    if (getNumResults() != (norm ? 2u : 1u))
      return emitOpError() << "'" << name << "' yields " << (norm ? "2 values" : "1 value");
    // What the lowering reads: the chain's last value first, then the norm of it.
    Value root = members[chain - 1]->getResult(0);
    ValueRange yielded = yield.getValues();
    if (yielded[0] != root ||
        (norm && (yielded[1] != members.back()->getResult(0) ||
                  cast<RMSNormOp>(members.back()).getInput() != root)))
      return emitOpError() << "'" << name << "' yields "
                           << (norm ? "the chain's last value, then its rms_norm"
                                    : "the chain's last value");
    return success();
  }
  case FusedKind::rotary:
    if (members.size() != 2 || !llvm::all_of(members, [](Operation *op) {
          return isa<RotaryOp>(op);
        }) || getNumResults() != 2)
      return emitOpError() << "'rotary' holds two tp.rotary ops and yields both";
    if (yield.getValues()[0] != members[0]->getResult(0) ||
        yield.getValues()[1] != members[1]->getResult(0))
      return emitOpError() << "'rotary' yields its two rotaries' results in order";
    return success();
  case FusedKind::linears: {
    if (members.size() < 2 || !llvm::all_of(members, [](Operation *op) {
          return isa<LinearOp>(op);
        }))
      return emitOpError() << "'linears' holds two or more tp.linear ops";
    Value input = cast<LinearOp>(members.front()).getInput();
    for (auto [op, yielded] : llvm::zip(members, yield.getValues()))
      if (cast<LinearOp>(op).getInput() != input || op->getResult(0) != yielded)
        return emitOpError() << "'linears' yields each linear's result in order, all of one "
                                "input";
    if (getNumResults() != members.size())
      return emitOpError() << "'linears' yields each linear's result in order, all of one "
                              "input";
    return success();
  }
  }
  llvm_unreachable("a tp.fused kind the verifier does not know");
}

SmallVector<double> RotaryOp::getFrequencies() {
  if (std::optional<ArrayRef<double>> given = getInvFreq())
    return SmallVector<double>(given->begin(), given->end());
  int64_t rotated = getHeadDim() - getUnrotated().value_or(0);
  SmallVector<double> frequencies;
  for (int64_t i = 0; i < rotated / 2; ++i)
    frequencies.push_back(
        std::pow(getTheta().convertToDouble(), -2.0 * double(i) / double(rotated)));
  return frequencies;
}
