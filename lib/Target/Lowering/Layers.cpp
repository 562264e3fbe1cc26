// The patterns of the layers: one runtime call per op, its arguments as tpcrt/calls.def
// names them, each op's result in its arena slot. Which optional arguments a call passes is
// decided here from the op's attributes; their order and the values of those left out are
// calls.def's.
#include "Lowering.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace tpc::tp;
using namespace tpc::target::lowering;

namespace {

double orDefault(std::optional<APFloat> v, double fallback) {
  return v ? v->convertToDouble() : fallback;
}

LogicalResult lower(FunctionLowering &l, EmbeddingOp e) {
  auto table = e.getTable().getDefiningOp<WeightOp>();
  auto param = table ? SymbolTable::lookupNearestSymbolFrom<ParamOp>(table, table.getParamAttr())
                     : ParamOp();
  if (!param)
    return l.unsupported(e, "an embedding whose table is not a parameter");
  int64_t vocab = param.getShardAttr() ? param.getShardAttr().getHfShape()[0]
                                       : param.getTensorType().getDimSize(0);
  bool byVocab = placementOf(e.getTable()) == ShardAttr::get(l.ctx, 0);
  return l.lowerInto(e, "embedding", [&](Call &c, Value out) {
    c.value("ids", l.ids)
        .value("n", l.n)
        .value("table", l.ref(e.getTable()))
        .integer("localRows", typeOf(e.getTable()).getDimSize(0))
        .integer("vocab", vocab)
        .integer("width", typeOf(e.getTable()).getDimSize(1))
        .boolean("byVocab", byVocab)
        .value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, RMSNormOp norm) {
  Value x = norm.getInput();
  double epsilon = norm.getEpsilon().convertToDouble();
  double offset = norm.getWeightOffset().convertToDouble();
  if (norm.getSumSquares()) // a row split by features: the sums come from all ranks
    return l.lowerInto(norm, "rmsNormOfTotals", [&](Call &c, Value out) {
      c.input(x)
          .value("totals", l.ref(norm.getSumSquares()))
          .integer("features", *norm.getFeatures())
          .value("weight", l.ref(norm.getWeight()))
          .real("epsilon", epsilon)
          .real("weightOffset", offset)
          .value("out", out);
    });
  return l.lowerInto(norm, "rmsNorm", [&](Call &c, Value out) {
    c.input(x)
        .integer("width", norm.getHeadDim() ? *norm.getHeadDim() : columns(x))
        .value("weight", l.ref(norm.getWeight()))
        .real("epsilon", epsilon)
        .real("weightOffset", offset)
        .value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, SumSquaresOp sum) {
  return l.lowerInto(sum, "sumSquares", [&](Call &c, Value out) {
    c.input(sum.getInput()).integer("copies", sum.getCopies()).value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, LinearOp linear) {
  return l.lowerInto(linear, "linear", [&](Call &c, Value out) {
    Value bias = l.biasOf(linear);
    c.input(linear.getInput())
        .value("w", l.ref(linear.getWeight()))
        .integer("outCols", typeOf(linear.getWeight()).getDimSize(0))
        .pointer("bias", bias)
        .value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, RotaryOp rotary) {
  return l.lowerInto(rotary, "rotary", [&](Call &c, Value out) {
    Value freq = l.invFreqOf(rotary);
    c.input(rotary.getInput())
        .integer("headDim", rotary.getHeadDim())
        .pointer("invFreq", freq)
        .value("positions", l.positionsOf(rotary, rotary.getInput()))
        .value("out", out);
    std::optional<APFloat> scaling = rotary.getScaling();
    bool mla = rotary.getInterleaved() || rotary.getUnrotated(); // DeepSeek's MLA
    if (scaling || mla)
      c.real("scaling", orDefault(scaling, 1.0));
    if (mla)
      c.boolean("interleaved", rotary.getInterleaved())
          .integer("unrotated", rotary.getUnrotated().value_or(0));
  });
}

LogicalResult lower(FunctionLowering &l, AttentionOp attention) {
  double scale = orDefault(attention.getScale(), 1.0 / std::sqrt(double(attention.getHeadDim())));
  return l.lowerInto(attention, "attention", [&](Call &c, Value out) {
    c.value("q", l.ref(attention.getQuery()))
        .value("k", l.ref(attention.getKey()))
        .value("v", l.ref(attention.getValue()))
        .value("n", l.n)
        .integer("heads", attention.getNumHeads())
        .integer("kvHeads", attention.getNumKvHeads())
        .integer("headDim", attention.getHeadDim())
        .real("scale", scale)
        .integer("slidingWindow", attention.getSlidingWindow().value_or(0))
        .real("softcap", orDefault(attention.getSoftcap(), 0.0))
        .integer("layer", l.attentionIndex++)
        .value("out", out);
    if (std::optional<int64_t> chunk = attention.getChunkSize()) // Llama 4
      c.integer("chunkSize", *chunk);
    if (attention.getTemperatureFloor()) // Llama 4's temperature tuning
      c.real("temperatureFloor", attention.getTemperatureFloor()->convertToDouble())
          .real("temperatureScale", attention.getTemperatureScale()->convertToDouble());
    if (std::optional<int64_t> group = attention.getKvGroup()) // heads split unevenly
      c.integer("kvGroup", *group).text("rankHeads", braced(*attention.getRankHeads()));
    if (Value sinks = attention.getSinks())
      c.value("sinks", l.ref(sinks));
    if (std::optional<int64_t> valueHeadDim = attention.getValueHeadDim())
      c.integer("valueHeadDim", *valueHeadDim);
  });
}

LogicalResult lower(FunctionLowering &l, RouterOp router) {
  return l.lowerInto(router, "router", [&](Call &c, Value out) {
    c.input(router.getInput())
        .value("w", l.ref(router.getWeight()))
        .integer("experts", typeOf(router.getWeight()).getDimSize(0))
        .integer("topK", router.getTopK())
        .boolean("normalize", router.getNormalize())
        .value("out", out);
    Value bias = router.getBias();
    bool deepseek = router.getScale() || router.getGroups();
    if (bias || router.getSoftmaxAfterTopK() || deepseek) // GPT-OSS's form
      c.pointer("bias", bias ? l.ref(bias) : Value())
          .boolean("softmaxAfterTopK", router.getSoftmaxAfterTopK());
    if (deepseek)
      c.real("scale", orDefault(router.getScale(), 1.0))
          .integer("groups", router.getGroups().value_or(0))
          .integer("topGroups", router.getTopGroups().value_or(0));
    if (router.getSigmoid()) // Llama 4's (the verifier allows none of the above with it)
      c.boolean("sigmoid", true);
  });
}

LogicalResult lower(FunctionLowering &l, L2NormOp norm) {
  return l.lowerInto(norm, "l2Norm", [&](Call &c, Value out) {
    c.input(norm.getInput())
        .integer("width", norm.getHeadDim())
        .real("epsilon", norm.getEpsilon().convertToDouble())
        .value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, ExpertsOp moe) {
  bool interleaved = moe.getLayout() == "in_out_interleaved";
  bool inOut = moe.getLayout() != "out_in";
  return l.lowerInto(moe, "experts", [&](Call &c, Value out) {
    c.input(moe.getInput())
        .value("routing", l.ref(moe.getRouting()))
        .integer("count", typeOf(moe.getGateUp()).getDimSize(0))
        .value("gateUp", l.ref(moe.getGateUp()))
        .value("down", l.ref(moe.getDown()))
        .integer("inter", typeOf(moe.getDown()).getDimSize(inOut ? 1 : 2))
        .boolean("geluTanh", moe.getActivation() == "gelu_tanh")
        .value("out", out);
    bool llama4 = (inOut && !interleaved) || moe.getScaleInput();
    if (interleaved || moe.getGateUpBias() || moe.getAlpha()) { // GPT-OSS's form
      Value gateUpBias = moe.getGateUpBias(), downBias = moe.getDownBias();
      c.boolean("inOutInterleaved", interleaved)
          .pointer("gateUpBias", gateUpBias ? l.ref(gateUpBias) : Value())
          .pointer("downBias", downBias ? l.ref(downBias) : Value())
          .real("alpha", orDefault(moe.getAlpha(), 0.0))
          .real("limit", orDefault(moe.getLimit(), 0.0));
    }
    if (llama4) // Llama 4's: [E, in, out] with gate's columns first, the input scaled
      c.boolean("inOut", inOut && !interleaved).boolean("scaleInput", moe.getScaleInput());
  });
}

LogicalResult lower(FunctionLowering &l, HeadSliceOp slice) {
  return l.lowerInto(slice, "headSlice", [&](Call &c, Value out) {
    c.input(slice.getInput())
        .integer("headDim", slice.getHeadDim())
        .integer("offset", slice.getOffset())
        .integer("size", slice.getSize())
        .value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, ConcatHeadsOp concat) {
  return l.lowerInto(concat, "concatHeads", [&](Call &c, Value out) {
    c.input(concat.getHeads())
        .integer("headDim", concat.getHeadDim())
        .value("shared", l.ref(concat.getShared()))
        .integer("sharedCols", columns(concat.getShared()))
        .value("out", out);
  });
}

/// silu, gelu, scale, softcap, identity, add, mul: [rows, cols] in, the same out.
LogicalResult lowerElementwise(FunctionLowering &l, Operation *op) {
  Value result = op->getResult(0);
  StringRef name = TypeSwitch<Operation *, StringRef>(op)
                       .Case([](ScaleOp) { return "scale"; })
                       .Case([](SoftcapOp) { return "softcap"; })
                       .Case([](GeluOp) { return "gelu"; })
                       .Case([](SiluOp) { return "silu"; })
                       .Case([](IdentityOp) { return "copy"; })
                       .Case([](AddOp) { return "add"; })
                       .Default([](Operation *) { return "mul"; });
  return l.lowerInto(op, name, [&](Call &c, Value out) {
    if (isa<AddOp, MulOp>(op))
      c.value("a", l.ref(op->getOperand(0))).value("b", l.ref(op->getOperand(1)));
    else
      c.value("x", l.ref(op->getOperand(0)));
    c.rows("rows", result).integer("cols", columns(result));
    if (auto s = dyn_cast<ScaleOp>(op))
      c.real("factor", s.getFactor().convertToDouble());
    if (auto s = dyn_cast<SoftcapOp>(op))
      c.real("cap", s.getCap().convertToDouble());
    if (auto g = dyn_cast<GeluOp>(op))
      c.boolean("tanh", g.getApproximate() == "tanh");
    c.value("out", out);
  });
}

LogicalResult lower(FunctionLowering &l, LastTokenOp last) {
  // The last token of each sequence the step samples; how many, the rows of what follows.
  FailureOr<Value> out = l.define(last);
  if (failed(out))
    return failure();
  l.sampled = l.call(last, "lastRows").input(last.getInput()).value("out", *out).emit(l.i64());
  return success(bool(l.sampled));
}

LogicalResult lower(FunctionLowering &l, SliceOp slice) {
  if (normalizeDim(slice.getDim(), 2) != 1)
    return l.unsupported(slice, "a slice of the token dim");
  return l.lowerInto(slice, "sliceColumns", [&](Call &c, Value out) {
    c.input(slice.getInput())
        .integer("offset", slice.getOffset())
        .integer("size", slice.getSize())
        .value("out", out);
  });
}

/// Each input into its columns of the result.
LogicalResult lower(FunctionLowering &l, ConcatOp concat) {
  if (normalizeDim(concat.getDim(), 2) != 1)
    return l.unsupported(concat, "a concat of the token dim");
  FailureOr<Value> out = l.define(concat);
  if (failed(out))
    return failure();
  int64_t at = 0;
  for (Value in : concat.getInputs()) {
    Call c = l.call(concat, "placeColumns");
    c.input(in)
        .value("out", *out)
        .integer("outCols", columns(concat.getResult()))
        .integer("at", at);
    c.emit();
    at += columns(in);
  }
  return success();
}

} // namespace

std::optional<LogicalResult> tpc::target::lowering::lowerLayer(FunctionLowering &l, Operation *op) {
  return TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<EmbeddingOp, RMSNormOp, L2NormOp, SumSquaresOp, LinearOp, RotaryOp, AttentionOp, RouterOp,
            ExpertsOp, HeadSliceOp, ConcatHeadsOp, LastTokenOp, SliceOp, ConcatOp>(
          [&](auto op) { return lower(l, op); })
      .Case<SiluOp, GeluOp, ScaleOp, SoftcapOp, IdentityOp, AddOp, MulOp>(
          [&](Operation *op) { return lowerElementwise(l, op); })
      .Default([](Operation *) { return std::nullopt; });
}
