// tp-lower-to-emitc: a partitioned tp program whose decisions are in the IR (collectives
// elided at tp 1, fused units, grouped linears, arena offsets) becomes EmitC: one call into
// the runtime per op, with the op's placement spelled out in its arguments. Nothing is decided
// here; what a target spells differently comes from its Spelling (include/tpc/Target).
#include "tpc/Dialect/TP/RepeatedDiagnostics.h"
#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Target/Passes.h"
#include "tpc/Target/Target.h"
#include "tpc/Transforms/Fusion.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <functional>

namespace tpc::target {
#define GEN_PASS_DEF_TPLOWERTOEMITC
#include "TP/TargetPasses.h.inc"
} // namespace tpc::target

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;
using namespace tpc::target;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

PlacementAttr placementOf(Value v) {
  PlacementAttr p = getPlacement(v);
  return p ? p : ReplicateAttr::get(v.getContext());
}

/// Columns of a [tokens, features] value (1 for a vector of tokens).
int64_t columns(Value v) { return typeOf(v).getRank() == 2 ? typeOf(v).getDimSize(1) : 1; }

std::string quoted(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string braced(ArrayRef<int64_t> values) {
  std::string s = "{";
  llvm::ListSeparator sep(", ");
  for (int64_t v : values)
    s += StringRef(sep).str() + std::to_string(v);
  return s + "}";
}

/// Global block sizes of a feature dim placed as `p`, whose global size is `global`.
std::string blocksOf(PlacementAttr p, int64_t global) {
  if (auto strided = dyn_cast<StridedShardAttr>(p))
    return braced(strided.getBlocks());
  return braced({global});
}

/// One emitc.call_opaque's arguments in order: values (operands) and literals.
class Args {
public:
  explicit Args(MLIRContext *ctx) : ctx(ctx) {}
  Args &value(Value v) {
    args.push_back(IntegerAttr::get(IndexType::get(ctx), operands.size()));
    operands.push_back(v);
    return *this;
  }
  Args &integer(int64_t v) {
    args.push_back(IntegerAttr::get(IntegerType::get(ctx, 64), v));
    return *this;
  }
  Args &real(double v) {
    args.push_back(FloatAttr::get(Float64Type::get(ctx), v));
    return *this;
  }
  Args &boolean(bool v) { return text(v ? "true" : "false"); }
  Args &string(StringRef s) { return text(quoted(s)); }
  /// A literal as C++ text: nullptr, a braced list, a function's name.
  Args &text(StringRef code) {
    args.push_back(emitc::OpaqueAttr::get(ctx, code));
    return *this;
  }

  SmallVector<Value> operands;
  SmallVector<Attribute> args;

private:
  MLIRContext *ctx;
};

/// The rows a value has on this rank: a count known at compile time (after tp.last_token),
/// the forward's token count n, or n / tp where the tokens are split.
struct Rows {
  Value count;      // n or n / tp, when not static
  int64_t fixed = 0; // when static
};

class FunctionLowering {
public:
  FunctionLowering(func::FuncOp func, const Spelling &spelling,
                   llvm::DenseMap<StringAttr, int64_t> &paramIndex, int64_t tp,
                   OpBuilder &moduleBuilder)
      : func(func), spelling(spelling), paramIndex(paramIndex), tp(tp),
        moduleBuilder(moduleBuilder), ctx(func.getContext()), builder(ctx) {}

  LogicalResult lower() {
    Location loc = func.getLoc();
    Type result = actPtr();
    auto type = FunctionType::get(ctx, {contextType(), idsType(), idsType(), i64()}, {result});
    auto lowered = emitc::FuncOp::create(moduleBuilder, loc, func.getSymName(), type);
    lowered.setSpecifiersAttr(builder.getStrArrayAttr({"static"}));
    Block *entry = lowered.addEntryBlock();
    builder.setInsertionPointToEnd(entry);
    cx = entry->getArgument(0);
    ids = entry->getArgument(1);
    positions = entry->getArgument(2);
    n = entry->getArgument(3);
    bool split = false;
    func.walk([&](Operation *op) {
      if (!isa<WeightOp>(op))
        for (Value v : op->getResults())
          split |= isSplitByTokens(v);
    });
    if (split) {
      auto tpValue = emitc::ConstantOp::create(builder, loc, i64(), builder.getI64IntegerAttr(tp));
      ns = emitc::DivOp::create(builder, loc, i64(), n, tpValue);
    }
    // Kernels of fused units go before the function, in the module.
    kernelPoint = lowered;
    for (Operation &op : func.getBody().front())
      if (failed(lowerOp(&op)))
        return failure();
    return success();
  }

private:
  // Types of the generated program.
  Type opaque(StringRef s) { return emitc::OpaqueType::get(ctx, s); }
  Type contextType() { return opaque(spelling.context()); }
  Type idsType() { return emitc::PointerType::get(opaque("const int64_t")); }
  Type actPtr() { return emitc::PointerType::get(opaque(spelling.element())); }
  Type constActPtr() { return emitc::PointerType::get(opaque(("const " + spelling.element()).str())); }
  Type i64() { return builder.getI64Type(); }
  std::string callee(StringRef name) { return (spelling.ns() + "::" + name).str(); }

  Value call(Location loc, StringRef name, Args &args, Type result = {}) {
    SmallVector<Type> results;
    if (result)
      results.push_back(result);
    auto op = emitc::CallOpaqueOp::create(builder, loc, results, name, args.operands,
                                          builder.getArrayAttr(args.args), ArrayAttr());
    return result ? op.getResult(0) : Value();
  }
  Args args() { return Args(ctx).value(cx); }

  /// The pointer an op reads for `v`: a function argument, a weight, or an arena slot.
  Value ref(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return arg.getArgNumber() == 0 ? ids : positions;
    return values.lookup(v);
  }

  /// Declares the arena pointer of `op`'s result `i`, at the offset tp-plan-arena recorded.
  FailureOr<Value> define(Operation *op, Value result, unsigned i) {
    auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(kArenaAttrName);
    if (!offsets || offsets.size() <= int64_t(i))
      return op->emitError() << "has no arena offset: run tp-plan-arena before lowering";
    Args a = args();
    a.integer(offsets[i]).value(n);
    Value slot = call(op->getLoc(), callee("slot"), a, actPtr());
    values[result] = slot;
    return slot;
  }
  FailureOr<Value> define(Operation *op) { return define(op, op->getResult(0), 0); }

  Rows rowsOf(Value v) {
    int64_t tokens = typeOf(v).getDimSize(0);
    if (!ShapedType::isDynamic(tokens))
      return {Value(), tokens};
    return {isSplitByTokens(v) ? ns : n, 0};
  }
  Args &addRows(Args &a, Value v) {
    Rows rows = rowsOf(v);
    return rows.count ? a.value(rows.count) : a.integer(rows.fixed);
  }

  LogicalResult unsupported(Operation *op, const Twine &what) {
    return op->emitError() << "the " << spelling.name() << " target cannot run " << what
                           << " yet";
  }

  LogicalResult lowerOp(Operation *op) {
    Location loc = op->getLoc();
    if (failed(spelling.supports(op)))
      return failure();
    if (auto weight = dyn_cast<WeightOp>(op)) {
      auto index = paramIndex.find(weight.getParamAttr().getAttr());
      if (index == paramIndex.end())
        return op->emitError() << "reads no tp.param";
      Args a = args();
      a.integer(index->second);
      values[weight.getResult()] = call(loc, callee("weight"), a, constActPtr());
      return success();
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 1 || !isa<ReplicateAttr>(placementOf(ret.getOperand(0))))
        return unsupported(op, "a forward that does not return one replicated logits tensor");
      emitc::ReturnOp::create(builder, loc, ref(ret.getOperand(0)));
      return success();
    }
    for (Value operand : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(operand); arg && arg.getArgNumber() > 1)
        return unsupported(op, "a forward with more than ids and positions");
    if (auto fused = dyn_cast<FusedOp>(op))
      return lowerFused(fused);
    return lowerLayer(op);
  }

  LogicalResult lowerLayer(Operation *op) {
    Location loc = op->getLoc();
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      auto table = e.getTable().getDefiningOp<WeightOp>();
      auto param = table ? SymbolTable::lookupNearestSymbolFrom<ParamOp>(table, table.getParamAttr())
                         : ParamOp();
      if (!param)
        return unsupported(op, "an embedding whose table is not a parameter");
      int64_t vocab = param.getShardAttr() ? param.getShardAttr().getHfShape()[0]
                                           : param.getTensorType().getDimSize(0);
      bool byVocab = placementOf(e.getTable()) == ShardAttr::get(ctx, 0);
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ids).value(n).value(ref(e.getTable())).integer(typeOf(e.getTable()).getDimSize(0))
          .integer(vocab).integer(typeOf(e.getTable()).getDimSize(1)).boolean(byVocab)
          .value(*out);
      call(loc, callee("embedding"), a);
      return success();
    }
    if (auto norm = dyn_cast<RMSNormOp>(op); norm && norm.getSumSquares()) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(norm.getInput()));
      addRows(a, norm.getInput())
          .integer(columns(norm.getInput()))
          .value(ref(norm.getSumSquares()))
          .integer(*norm.getFeatures())
          .value(ref(norm.getWeight()))
          .real(norm.getEpsilon().convertToDouble())
          .real(norm.getWeightOffset().convertToDouble())
          .value(*out);
      call(loc, callee("rmsNormOfTotals"), a);
      return success();
    }
    if (auto sum = dyn_cast<SumSquaresOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(sum.getInput()));
      addRows(a, sum.getInput()).integer(columns(sum.getInput())).integer(sum.getCopies()).value(*out);
      call(loc, callee("sumSquares"), a);
      return success();
    }
    if (auto norm = dyn_cast<RMSNormOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(norm.getInput()));
      addRows(a, norm.getInput())
          .integer(columns(norm.getInput()))
          .integer(norm.getHeadDim() ? *norm.getHeadDim() : columns(norm.getInput()))
          .value(ref(norm.getWeight()))
          .real(norm.getEpsilon().convertToDouble())
          .real(norm.getWeightOffset().convertToDouble())
          .value(*out);
      call(loc, callee("rmsNorm"), a);
      return success();
    }
    if (auto linear = dyn_cast<LinearOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Value bias = biasOf(linear);
      Args a = args();
      a.value(ref(linear.getInput()));
      addRows(a, linear.getInput())
          .integer(columns(linear.getInput()))
          .value(ref(linear.getWeight()))
          .integer(typeOf(linear.getWeight()).getDimSize(0));
      (bias ? a.value(bias) : a.text("nullptr")).value(*out);
      call(loc, callee("linear"), a);
      return success();
    }
    if (auto rotary = dyn_cast<RotaryOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Value freq = invFreqOf(rotary);
      Args a = args();
      a.value(ref(rotary.getInput()));
      addRows(a, rotary.getInput())
          .integer(columns(rotary.getInput()))
          .integer(rotary.getHeadDim())
          .real(rotary.getTheta().convertToDouble());
      (freq ? a.value(freq) : a.text("nullptr")).value(positionsOf(rotary.getInput())).value(*out);
      std::optional<APFloat> scaling = rotary.getScaling();
      bool mla = rotary.getInterleaved() || rotary.getUnrotated(); // DeepSeek's MLA
      if (scaling || mla)
        a.real(scaling ? scaling->convertToDouble() : 1.0);
      if (mla)
        a.boolean(rotary.getInterleaved()).integer(rotary.getUnrotated().value_or(0));
      call(loc, callee("rotary"), a);
      return success();
    }
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      double scale = attention.getScale() ? attention.getScale()->convertToDouble()
                                          : 1.0 / std::sqrt(double(attention.getHeadDim()));
      Args a = args();
      a.value(ref(attention.getQuery()))
          .value(ref(attention.getKey()))
          .value(ref(attention.getValue()))
          .value(n)
          .integer(attention.getNumHeads())
          .integer(attention.getNumKvHeads())
          .integer(attention.getHeadDim());
      if (std::optional<int64_t> valueHeadDim = attention.getValueHeadDim())
        a.integer(*valueHeadDim);
      a.real(scale)
          .integer(attention.getSlidingWindow().value_or(0))
          .real(attention.getSoftcap() ? attention.getSoftcap()->convertToDouble() : 0.0)
          .integer(attentionIndex++);
      if (std::optional<int64_t> group = attention.getKvGroup()) // heads split unevenly
        a.integer(*group).text(braced(*attention.getRankHeads()));
      if (Value sinks = attention.getSinks())
        a.value(ref(sinks));
      a.value(*out);
      call(loc, callee("attention"), a);
      return success();
    }
    if (auto router = dyn_cast<RouterOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(router.getInput()));
      addRows(a, router.getInput())
          .integer(columns(router.getInput()))
          .value(ref(router.getWeight()))
          .integer(typeOf(router.getWeight()).getDimSize(0))
          .integer(router.getTopK())
          .boolean(router.getNormalize())
          .value(*out);
      bool deepseek = router.getScale() || router.getGroups();
      if (router.getBias() || router.getSoftmaxAfterTopK() || deepseek) {
        Value bias = router.getBias();
        if (bias)
          a.value(ref(bias));
        else
          a.text("nullptr");
        a.boolean(router.getSoftmaxAfterTopK());
      }
      if (deepseek)
        a.real(router.getScale() ? router.getScale()->convertToDouble() : 1.0)
            .integer(router.getGroups().value_or(0))
            .integer(router.getTopGroups().value_or(0));
      call(loc, callee("router"), a);
      return success();
    }
    if (auto slice = dyn_cast<HeadSliceOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(slice.getInput()));
      addRows(a, slice.getInput())
          .integer(columns(slice.getInput()))
          .integer(slice.getHeadDim())
          .integer(slice.getOffset())
          .integer(slice.getSize())
          .value(*out);
      call(loc, callee("headSlice"), a);
      return success();
    }
    if (auto concat = dyn_cast<ConcatHeadsOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(concat.getHeads()));
      addRows(a, concat.getHeads())
          .integer(columns(concat.getHeads()))
          .integer(concat.getHeadDim())
          .value(ref(concat.getShared()))
          .integer(columns(concat.getShared()))
          .value(*out);
      call(loc, callee("concatHeads"), a);
      return success();
    }
    if (auto moe = dyn_cast<ExpertsOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(moe.getInput()));
      addRows(a, moe.getInput())
          .integer(columns(moe.getInput()))
          .value(ref(moe.getRouting()))
          .integer(typeOf(moe.getGateUp()).getDimSize(0))
          .value(ref(moe.getGateUp()))
          .value(ref(moe.getDown()));
      bool inOut = moe.getLayout() == "in_out_interleaved";
      a.integer(typeOf(moe.getDown()).getDimSize(inOut ? 1 : 2))
          .boolean(moe.getActivation() == "gelu_tanh")
          .value(*out);
      if (inOut || moe.getGateUpBias() || moe.getAlpha()) { // GPT-OSS's form
        Value gateUpBias = moe.getGateUpBias(), downBias = moe.getDownBias();
        a.boolean(inOut);
        for (Value bias : {gateUpBias, downBias}) {
          if (bias)
            a.value(ref(bias));
          else
            a.text("nullptr");
        }
        a.real(moe.getAlpha() ? moe.getAlpha()->convertToDouble() : 0.0)
            .real(moe.getLimit() ? moe.getLimit()->convertToDouble() : 0.0);
      }
      call(loc, callee("experts"), a);
      return success();
    }
    if (isa<SiluOp, GeluOp, ScaleOp, SoftcapOp, IdentityOp, AddOp, MulOp>(op)) {
      Value result = op->getResult(0);
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      for (Value operand : op->getOperands())
        a.value(ref(operand));
      addRows(a, result).integer(columns(result));
      StringRef name = TypeSwitch<Operation *, StringRef>(op)
                           .Case([&](ScaleOp s) {
                             a.real(s.getFactor().convertToDouble());
                             return "scale";
                           })
                           .Case([&](SoftcapOp s) {
                             a.real(s.getCap().convertToDouble());
                             return "softcap";
                           })
                           .Case([&](GeluOp g) {
                             a.boolean(g.getApproximate() == "tanh");
                             return "gelu";
                           })
                           .Case([](SiluOp) { return "silu"; })
                           .Case([](IdentityOp) { return "copy"; })
                           .Case([](AddOp) { return "add"; })
                           .Default([](Operation *) { return "mul"; });
      a.value(*out);
      call(loc, callee(name), a);
      return success();
    }
    if (auto last = dyn_cast<LastTokenOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(last.getInput()));
      addRows(a, last.getInput()).integer(columns(last.getInput())).value(*out);
      call(loc, callee("lastRow"), a);
      return success();
    }
    if (auto slice = dyn_cast<SliceOp>(op)) {
      if (normalizeDim(slice.getDim(), 2) != 1)
        return unsupported(op, "a slice of the token dim");
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(slice.getInput()));
      addRows(a, slice.getInput())
          .integer(columns(slice.getInput()))
          .integer(slice.getOffset())
          .integer(slice.getSize())
          .value(*out);
      call(loc, callee("sliceColumns"), a);
      return success();
    }
    if (auto concat = dyn_cast<ConcatOp>(op)) {
      if (normalizeDim(concat.getDim(), 2) != 1)
        return unsupported(op, "a concat of the token dim");
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      int64_t at = 0;
      for (Value in : concat.getInputs()) {
        Args a = args();
        a.value(ref(in));
        addRows(a, in).integer(columns(in)).value(*out).integer(columns(concat.getResult()))
            .integer(at);
        call(loc, callee("placeColumns"), a);
        at += columns(in);
      }
      return success();
    }
    return lowerCommunication(op);
  }

  LogicalResult lowerCommunication(Operation *op) {
    Location loc = op->getLoc();
    StringRef module = getModuleName(op);
    auto named = [&](Args &a) -> Args & { return module.empty() ? a.text("nullptr") : a.string(module); };
    if (auto reduce = dyn_cast<AllReduceOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(reduce.getInput()));
      addRows(a, reduce.getInput()).integer(columns(reduce.getInput())).value(*out);
      call(loc, callee("allReduce"), named(a));
      return success();
    }
    if (auto gather = dyn_cast<AllGatherOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(gather.getInput()));
      if (normalizeDim(gather.getDim(), 2) == 0) {
        addRows(a, gather.getInput()).integer(columns(gather.getInput())).value(*out);
        call(loc, callee("allGatherRows"), named(a));
      } else {
        addRows(a, gather.getInput())
            .text(blocksOf(placementOf(gather.getInput()), columns(gather.getResult())))
            .value(*out);
        call(loc, callee("allGatherColumns"), named(a));
      }
      return success();
    }
    if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(scatter.getInput()));
      if (normalizeDim(scatter.getDim(), 2) == 0) {
        addRows(a, scatter.getInput()).integer(columns(scatter.getInput())).value(*out);
        call(loc, callee("reduceScatterRows"), named(a));
      } else {
        addRows(a, scatter.getInput())
            .text(blocksOf(placementOf(scatter.getResult()), columns(scatter.getInput())))
            .value(*out);
        call(loc, callee("reduceScatterColumns"), named(a));
      }
      return success();
    }
    if (auto a2a = dyn_cast<AllToAllOp>(op)) {
      bool rowsToColumns = normalizeDim(a2a.getSplitDim(), 2) == 1;
      Value sharded = rowsToColumns ? a2a.getResult() : a2a.getInput();
      // The feature dim's global size: what the token-split side holds whole.
      int64_t global = columns(rowsToColumns ? a2a.getInput() : a2a.getResult());
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(a2a.getInput()))
          .value(n)
          .text(blocksOf(placementOf(sharded), global))
          .boolean(rowsToColumns)
          .value(*out);
      call(loc, callee("allToAll"), named(a));
      return success();
    }
    if (auto reshard = dyn_cast<LocalReshardOp>(op)) {
      PlacementAttr src = placementOf(reshard.getInput()), dst = placementOf(reshard.getResult());
      Value in = reshard.getInput();
      FailureOr<Value> out = define(op);
      if (failed(out))
        return failure();
      Args a = args();
      a.value(ref(in));
      StringRef name;
      if (isa<ReplicateAttr>(src) && isa<PartialAttr>(dst)) {
        addRows(a, in).integer(columns(in));
        name = "partialFromReplicate";
      } else if (isa<ReplicateAttr>(src) && isSplitByTokens(reshard.getResult())) {
        a.value(n).integer(columns(in));
        name = "takeRows";
      } else if (isa<ReplicateAttr>(src)) {
        addRows(a, in).text(blocksOf(dst, columns(in)));
        name = "takeColumns";
      } else if (isa<PartialAttr>(dst) && isSplitByTokens(in)) {
        a.value(n).integer(columns(in));
        name = "partialFromRows";
      } else if (isa<PartialAttr>(dst)) {
        addRows(a, in).text(blocksOf(src, columns(reshard.getResult())));
        name = "partialFromColumns";
      } else {
        return unsupported(op, "a reshard from " + src.str() + " to " + dst.str());
      }
      a.value(*out);
      call(loc, callee(name), a);
      return success();
    }
    return unsupported(op, op->getName().getStringRef().str());
  }

  /// A linear's bias; a Partial result adds it on one rank only, so that it counts once in
  /// the sum.
  Value biasOf(LinearOp linear) {
    Value b = linear.getBias();
    if (!b)
      return Value();
    if (!isa<PartialAttr>(placementOf(linear.getResult())))
      return ref(b);
    Args a = args();
    a.value(ref(b));
    return call(linear.getLoc(), callee("onRankZero"), a, constActPtr());
  }

  /// The positions of a value's rows: this rank's slice of them where tokens are split.
  Value positionsOf(Value input) {
    if (!isSplitByTokens(input))
      return positions;
    Args a = args();
    a.value(positions).value(ns);
    return call(input.getLoc(), callee("localPositions"), a, idsType());
  }

  /// The scaled RoPE frequencies of a rotary, as a static array; null for theta's own.
  Value invFreqOf(RotaryOp rotary) {
    std::optional<ArrayRef<double>> given = rotary.getInvFreq();
    if (!given)
      return Value();
    std::string name = (func.getSymName() + "_inv_freq_" + Twine(globals++)).str();
    auto type = emitc::ArrayType::get({int64_t(given->size())}, builder.getF64Type());
    OpBuilder::InsertionGuard guard(moduleBuilder);
    moduleBuilder.setInsertionPoint(kernelPoint);
    auto values = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(given->size())}, builder.getF64Type()), *given);
    emitc::GlobalOp::create(moduleBuilder, rotary.getLoc(), name, type, values,
                            /*externSpecifier=*/false, /*staticSpecifier=*/true,
                            /*constSpecifier=*/true);
    return emitc::GetGlobalOp::create(builder, rotary.getLoc(), type, name);
  }

  //===--------------------------------------------------------------------------------===//
  // Fused units
  //===--------------------------------------------------------------------------------===//

  LogicalResult lowerFused(FusedOp fused) {
    FusedKind kind = fused.getKind();
    if (kind == FusedKind::linears)
      return lowerLinears(fused);
    std::string name = (func.getSymName() + "_fused_" + Twine(kernels++)).str();
    if (kind == FusedKind::rotary)
      return lowerRotary(fused, name);
    SmallVector<Operation *> members(llvm::make_pointer_range(fused.getMembers()));
    Operation *root = members[kind == FusedKind::norm ? members.size() - 2 : members.size() - 1];
    llvm::SetVector<Value> inputs;
    ChainCode chain = chainCode(fused, root->getResult(0), inputs);
    Value stored = fused.getResult(0);
    std::string kernel;
    RMSNormOp norm = kind == FusedKind::norm ? cast<RMSNormOp>(members.back()) : RMSNormOp();
    if (norm)
      kernel = spelling.normKernel(name, chain, columns(stored),
                                   norm.getHeadDim() ? *norm.getHeadDim() : columns(stored),
                                   norm.getEpsilon().convertToDouble(),
                                   norm.getWeightOffset().convertToDouble());
    else
      kernel = spelling.elementwiseKernel(name, chain, columns(stored));
    addKernel(kernel);
    SmallVector<Value> outs;
    for (auto [i, result] : llvm::enumerate(fused.getResults())) {
      FailureOr<Value> out = define(fused, result, i);
      if (failed(out))
        return failure();
      outs.push_back(*out);
    }
    Args a = args();
    addRows(a, stored);
    for (Value in : inputs)
      a.value(ref(in));
    if (norm)
      a.value(ref(norm.getWeight()));
    for (Value out : outs)
      a.value(out);
    call(fused.getLoc(), name, a);
    return success();
  }

  /// The chain that computes `value` inside `fused`, as straight-line code over loads of the
  /// values it reads from outside (collected in `inputs`).
  ChainCode chainCode(FusedOp fused, Value value, llvm::SetVector<Value> &inputs) {
    ChainCode code;
    llvm::DenseMap<Value, std::string> computed;
    std::function<std::string(Value)> valueOf = [&](Value v) -> std::string {
      if (auto it = computed.find(v); it != computed.end())
        return it->second;
      Operation *def = v.getDefiningOp();
      std::string line;
      llvm::raw_string_ostream c(line);
      std::string name;
      if (def && def->getParentOp() == fused) {
        SmallVector<std::string> a;
        for (Value operand : def->getOperands())
          a.push_back(valueOf(operand));
        name = "x" + std::to_string(code.lines.size());
        c << "const acc " << name << " = ";
        if (isa<SiluOp>(def))
          c << "silu(" << a[0] << ")";
        else if (auto gelu = dyn_cast<GeluOp>(def))
          c << (gelu.getApproximate() == "tanh" ? "geluTanh(" : "gelu(") << a[0] << ")";
        else if (auto scale = dyn_cast<ScaleOp>(def))
          c << a[0] << " * acc(" << doubleLiteral(scale.getFactor().convertToDouble()) << ")";
        else if (auto cap = dyn_cast<SoftcapOp>(def))
          c << "softcap(" << a[0] << ", acc(" << doubleLiteral(cap.getCap().convertToDouble())
            << "))";
        else
          c << a[0] << (isa<AddOp>(def) ? " + " : " * ") << a[1];
        c << ";";
        code.what += StringRef(code.what.empty() ? "" : ", ").str() +
                     def->getName().stripDialect().str();
      } else {
        inputs.insert(v);
        name = "x" + std::to_string(code.lines.size());
        c << "const acc " << name << " = load(in" << inputs.size() - 1 << ", i);";
      }
      code.lines.push_back(line);
      computed[v] = name;
      return name;
    };
    code.result = valueOf(value);
    code.inputs = inputs.size();
    if (isa<RMSNormOp>(&*std::prev(fused.getMembers().end())))
      code.what += ", rms_norm";
    StringRef module = getModuleName(value.getDefiningOp());
    if (!module.empty())
      code.what += (" in " + module).str();
    return code;
  }

  LogicalResult lowerRotary(FusedOp fused, StringRef name) {
    SmallVector<Operation *> members(llvm::make_pointer_range(fused.getMembers()));
    auto first = cast<RotaryOp>(members[0]), second = cast<RotaryOp>(members[1]);
    int64_t headDim = first.getHeadDim(), half = headDim / 2;
    SmallVector<double> frequencies;
    if (std::optional<ArrayRef<double>> given = first.getInvFreq())
      frequencies.assign(given->begin(), given->end());
    else
      for (int64_t i = 0; i < half; ++i)
        frequencies.push_back(
            std::pow(first.getTheta().convertToDouble(), -2.0 * double(i) / double(headDim)));
    if (int64_t(frequencies.size()) != half)
      return first.emitError() << "rotary inv_freq has " << frequencies.size()
                               << " values for a head_dim of " << headDim;
    double scaling = first.getScaling() ? first.getScaling()->convertToDouble() : 1.0;
    addKernel(spelling.rotaryKernel(name, headDim, columns(first.getInput()) / headDim,
                                    columns(second.getInput()) / headDim, frequencies, scaling));
    FailureOr<Value> aOut = define(fused, fused.getResult(0), 0);
    FailureOr<Value> bOut = define(fused, fused.getResult(1), 1);
    if (failed(aOut) || failed(bOut))
      return failure();
    Args a = args();
    addRows(a, first.getInput())
        .value(ref(first.getInput()))
        .value(*aOut)
        .value(ref(second.getInput()))
        .value(*bOut)
        .value(positionsOf(first.getInput()));
    call(fused.getLoc(), name, a);
    return success();
  }

  /// Linears of one input: one GEMM over their adjacent weights for one row; one GEMM each
  /// for more rows (where each member's output block is [rows, its columns]).
  LogicalResult lowerLinears(FusedOp fused) {
    if (!spelling.groupsLinears())
      return fused.emitError() << "the " << spelling.name()
                               << " target keeps each weight in its own buffer: it runs no "
                                  "grouped linears (leave out tp-group-linears)";
    SmallVector<LinearOp> members;
    for (Operation &op : fused.getMembers())
      members.push_back(cast<LinearOp>(op));
    SmallVector<Value> outs;
    int64_t total = 0;
    for (auto [i, result] : llvm::enumerate(fused.getResults())) {
      FailureOr<Value> out = define(fused, result, i);
      if (failed(out))
        return failure();
      outs.push_back(*out);
      values[members[i].getResult()] = *out;
      total += columns(result);
    }
    Value input = members.front().getInput();
    Location loc = fused.getLoc();
    auto one = [&](LinearOp linear, Value out, bool whole) {
      Args a = args();
      a.value(ref(input));
      if (whole)
        a.integer(1);
      else
        addRows(a, input);
      a.integer(columns(input)).value(ref(linear.getWeight()))
          .integer(whole ? total : columns(linear.getResult()));
      Value bias = linear.getBias() ? ref(linear.getBias()) : Value();
      (bias ? a.value(bias) : a.text("nullptr")).value(out);
      call(loc, callee("linear"), a);
    };
    Rows rows = rowsOf(input);
    if (!rows.count && rows.fixed == 1) {
      one(members.front(), outs.front(), /*whole=*/true);
      return success();
    }
    auto each = [&] {
      for (auto [linear, out] : llvm::zip(members, outs))
        one(linear, out, /*whole=*/false);
    };
    if (!rows.count) {
      each();
      return success();
    }
    auto oneRow = emitc::ConstantOp::create(builder, loc, i64(), builder.getI64IntegerAttr(1));
    auto isOne = emitc::CmpOp::create(builder, loc, builder.getI1Type(), emitc::CmpPredicate::eq,
                                      rows.count, oneRow);
    auto branch = emitc::IfOp::create(builder, loc, isOne, /*addThenBlock=*/true,
                                      /*addElseBlock=*/true);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&branch.getThenRegion().front());
    one(members.front(), outs.front(), /*whole=*/true);
    emitc::YieldOp::create(builder, loc);
    builder.setInsertionPointToStart(&branch.getElseRegion().front());
    each();
    emitc::YieldOp::create(builder, loc);
    return success();
  }

  void addKernel(const std::string &text) {
    OpBuilder::InsertionGuard guard(moduleBuilder);
    moduleBuilder.setInsertionPoint(kernelPoint);
    emitc::VerbatimOp::create(moduleBuilder, func.getLoc(), text);
  }

  func::FuncOp func;
  const Spelling &spelling;
  llvm::DenseMap<StringAttr, int64_t> &paramIndex;
  int64_t tp;
  OpBuilder &moduleBuilder;
  MLIRContext *ctx;
  OpBuilder builder;
  Operation *kernelPoint = nullptr;
  Value cx, ids, positions, n, ns;
  llvm::DenseMap<Value, Value> values;
  int attentionIndex = 0, kernels = 0, globals = 0;
};

struct TPLowerToEmitCPass : tpc::target::impl::TPLowerToEmitCBase<TPLowerToEmitCPass> {
  using TPLowerToEmitCBase::TPLowerToEmitCBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::unique_ptr<Spelling> spelling = makeSpelling(target);
    if (!spelling) {
      module.emitError() << "unknown target '" << target << "'; the targets are cpu and cuda";
      return signalPassFailure();
    }
    if (failed(lower(module, *spelling)))
      signalPassFailure();
  }

  LogicalResult lower(ModuleOp module, const Spelling &spelling) {
    MLIRContext *ctx = module.getContext();
    SmallVector<func::FuncOp> forwards(module.getOps<func::FuncOp>());
    func::FuncOp plain, split;
    for (func::FuncOp f : forwards)
      (f->hasAttr(kSequenceParallelAttrName) ? split : plain) = f;
    if (!plain || forwards.size() != (split ? 2u : 1u))
      return module.emitError() << "the " << spelling.name()
                                << " target needs one forward (and at most one "
                                   "sequence-parallel forward beside it)";
    int64_t tp = getMeshSize(module).value_or(1);
    std::string name = module.getSymName() ? module.getSymName()->str() : "model";

    llvm::DenseMap<StringAttr, int64_t> paramIndex;
    SmallVector<ParamOp> params(module.getOps<ParamOp>());
    for (ParamOp param : params)
      paramIndex[param.getSymNameAttr()] = paramIndex.size();

    OpBuilder mb(ctx);
    mb.setInsertionPointToEnd(module.getBody());
    Location loc = module.getLoc();
    emitc::IncludeOp::create(mb, loc, spelling.include(), /*isStandardInclude=*/true);
    for (func::FuncOp f : {plain, split}) {
      if (!f)
        continue;
      if (!f->hasAttr(kArenaSizeAttrName))
        return f.emitError() << "has no arena: run tp-plan-arena before lowering";
      if (failed(FunctionLowering(f, spelling, paramIndex, tp, mb).lower()))
        return failure();
    }
    if (failed(lowerMain(module, spelling, name, tp, params, plain, split, mb)))
      return failure();
    // What remains of the tp program is now spelled out.
    for (Operation &op : llvm::make_early_inc_range(module.getBody()->getOperations()))
      if (!isa<emitc::EmitCDialect>(op.getDialect()))
        op.erase();
    for (NamedAttribute attr : llvm::to_vector(module->getDiscardableAttrs()))
      if (attr.getName().getValue().starts_with("tp."))
        module->removeAttr(attr.getName());
    return success();
  }

  LogicalResult lowerMain(ModuleOp module, const Spelling &spelling, StringRef name, int64_t tp,
                          ArrayRef<ParamOp> params, func::FuncOp plain, func::FuncOp split,
                          OpBuilder &mb) {
    MLIRContext *ctx = module.getContext();
    Location loc = module.getLoc();
    Type charPtrPtr = emitc::PointerType::get(
        emitc::PointerType::get(emitc::OpaqueType::get(ctx, "char")));
    auto mainType = FunctionType::get(ctx, {mb.getI32Type(), charPtrPtr}, {mb.getI32Type()});
    auto main = emitc::FuncOp::create(mb, loc, "main", mainType);
    Block *entry = main.addEntryBlock();
    OpBuilder b = OpBuilder::atBlockEnd(entry);
    Type specType = emitc::PointerType::get(emitc::OpaqueType::get(ctx, "tpcrt::ModelSpec"));
    auto callIn = [&](StringRef callee, Args &a, Type result = {}) -> Value {
      SmallVector<Type> results;
      if (result)
        results.push_back(result);
      auto op = emitc::CallOpaqueOp::create(b, loc, results, callee, a.operands,
                                            b.getArrayAttr(a.args), ArrayAttr());
      return result ? op.getResult(0) : Value();
    };

    func::FuncOp forward = plain;
    Value logits = forward.getBody().front().getTerminator()->getOperand(0);
    int64_t arena = 0;
    for (func::FuncOp f : {plain, split})
      if (f)
        arena = std::max(arena, f->getAttrOfType<IntegerAttr>(kArenaSizeAttrName).getInt());
    Args s(ctx);
    s.string(name).integer(tp).integer(columns(logits)).integer(arena)
        .boolean(typeOf(logits).getDimSize(0) == 1);
    Value spec = callIn("tpcrt::newSpec", s, specType);

    // Parameters: their HF shapes and what this rank loads of them.
    for (ParamOp param : params) {
      SmallVector<int64_t> hfShape(param.getTensorType().getShape());
      std::string slice = "tpcrt::SliceSpec{}";
      if (ShardDescAttr shard = param.getShardAttr()) {
        hfShape.assign(shard.getHfShape().begin(), shard.getHfShape().end());
        slice = "tpcrt::SliceSpec{" + std::to_string(shard.getDim()) + ", " +
                braced(shard.getOffsets()) + ", " + braced(shard.getSizes()) + ", " +
                std::to_string(shard.getChunks()) + ", 0";
        if (!shard.getRanks().empty()) // each rank's extent, padded to this local size
          slice += ", " + braced(shard.getRanks()) + ", " +
                   std::to_string(param.getTensorType().getDimSize(shard.getDim()));
        slice += "}";
      }
      std::string sources = "std::vector<std::string>{";
      llvm::ListSeparator sep(", ");
      if (ArrayAttr names = param.getSourcesAttr())
        for (Attribute source : names)
          sources += StringRef(sep).str() + quoted(cast<StringAttr>(source).getValue());
      sources += "}";
      Args a(ctx);
      a.value(spec).string(param.getSymName()).text("std::vector<int64_t>" + braced(hfShape))
          .text(slice).text(sources);
      callIn("tpcrt::addParam", a);
    }
    // One KV cache per attention layer (the plain forward's; the other has the same layers).
    int64_t maxHeads = 0, maxHeadDim = 0;
    plain.walk([&](AttentionOp attention) {
      Args a(ctx);
      a.value(spec).integer(attention.getNumKvHeads() * attention.getHeadDim());
      if (std::optional<int64_t> valueHeadDim = attention.getValueHeadDim())
        a.integer(attention.getNumKvHeads() * *valueHeadDim);
      callIn("tpcrt::addKvCache", a);
      maxHeads = std::max<int64_t>(maxHeads, attention.getNumHeads());
      maxHeadDim = std::max<int64_t>(maxHeadDim, attention.getHeadDim());
    });
    if (auto eos = module->getAttrOfType<DenseI64ArrayAttr>(kEosTokenIdsAttrName))
      for (int64_t id : eos.asArrayRef()) {
        Args a(ctx);
        a.value(spec).integer(id);
        callIn("tpcrt::addEosId", a);
      }
    // The context the model was made for bounds the binary's default --max-seq-len.
    if (auto positions = module->getAttrOfType<IntegerAttr>(kMaxPositionEmbeddingsAttrName)) {
      Args a(ctx);
      a.value(spec).integer(positions.getInt());
      callIn("tpcrt::setMaxPositions", a);
    }
    if (spelling.groupsLinears()) {
      // The device lays these parameters' weights one after the other (tp-group-linears'
      // units; a parameter is in one group at most, the same in both forwards).
      llvm::DenseMap<StringAttr, int64_t> index;
      for (ParamOp param : params)
        index[param.getSymNameAttr()] = index.size();
      std::vector<SmallVector<int64_t>> groups;
      auto add = [&](SmallVector<int64_t> group) {
        if (group.size() > 1 && !llvm::is_contained(groups, group))
          groups.push_back(group);
      };
      for (func::FuncOp f : {plain, split})
        if (f)
          f.walk([&](FusedOp fused) {
            if (fused.getKind() != FusedKind::linears)
              return;
            SmallVector<int64_t> weights, biases;
            for (Operation &op : fused.getMembers()) {
              auto linear = cast<LinearOp>(op);
              weights.push_back(index.lookup(
                  linear.getWeight().getDefiningOp<WeightOp>().getParamAttr().getAttr()));
              if (Value bias = linear.getBias())
                biases.push_back(
                    index.lookup(bias.getDefiningOp<WeightOp>().getParamAttr().getAttr()));
            }
            add(weights);
            add(biases);
          });
      for (const SmallVector<int64_t> &group : groups) {
        Args a(ctx);
        a.value(spec).text("std::vector<int>" + braced(group));
        callIn((spelling.ns() + "::addWeightGroup").str(), a);
      }
      Args bounds(ctx);
      bounds.value(spec).integer(maxHeads).integer(maxHeadDim);
      callIn((spelling.ns() + "::setAttentionBounds").str(), bounds);
    }
    Args f(ctx);
    f.value(spec).text(plain.getSymName()).text(split ? split.getSymName() : "nullptr");
    callIn((spelling.ns() + "::setForwards").str(), f);
    Args r(ctx);
    r.value(spec).value(entry->getArgument(0)).value(entry->getArgument(1));
    Value code = callIn((spelling.ns() + "::runModel").str(), r, b.getI32Type());
    emitc::ReturnOp::create(b, loc, code);
    return success();
  }
};

} // namespace

std::string tpc::target::floatLiteral(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%af", double(float(v)));
  return buffer;
}

std::vector<std::string> tpc::target::rotaryPairCode(int64_t headDim, int64_t aHeads,
                                                     int64_t bHeads, StringRef frequencies,
                                                     StringRef scaling) {
  std::string half = std::to_string(headDim / 2), heads = std::to_string(aHeads + bHeads);
  std::string a = std::to_string(aHeads), d = std::to_string(headDim);
  return {
      "const int64_t f = i % " + half + ", head = i / " + half + " % " + heads +
          ", r = i / " + half + " / " + heads + ";",
      "const bool inA = head < " + a + ";",
      "const int64_t at = inA ? (r * " + a + " + head) * " + d + " : (r * " +
          std::to_string(bHeads) + " + head - " + a + ") * " + d + ";",
      "const auto *x = (inA ? a : b) + at;",
      "auto *y = (inA ? aOut : bOut) + at;",
      "const acc angle = acc(positions[r]) * " + frequencies.str() + "[f];",
      scaling.empty() ? "const acc c = cosine(angle), s = sine(angle);"
                      : "const acc c = cosine(angle) * " + scaling.str() + ", s = sine(angle) * " +
                            scaling.str() + ";",
      "const acc u = load(x, f), v = load(x, f + " + half + ");",
      "store(y, f, u * c - v * s);",
      "store(y, f + " + half + ", v * c + u * s);",
  };
}

std::string tpc::target::indentLines(const std::vector<std::string> &lines, StringRef prefix) {
  std::string text;
  for (const std::string &line : lines)
    text += prefix.str() + line + "\n";
  return text;
}

std::string tpc::target::doubleLiteral(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%a", v);
  return buffer;
}

std::unique_ptr<Spelling> tpc::target::makeSpelling(StringRef target) {
  if (target == "cpu")
    return makeCpuSpelling();
  if (target == "cuda")
    return makeCudaSpelling();
  return nullptr;
}

OwningOpRef<ModuleOp> tpc::target::lowerToEmitC(ModuleOp program, StringRef target) {
  tp::RepeatedDiagnosticHandler onePerCause(program.getContext());
  OwningOpRef<ModuleOp> copy = program.clone();
  PassManager pm(program.getContext());
  TPLowerToEmitCOptions options;
  options.target = target.str();
  pm.addPass(createTPLowerToEmitC(options));
  if (failed(pm.run(*copy)))
    return nullptr;
  return copy;
}

LogicalResult tpc::target::emitSource(ModuleOp program, StringRef target, raw_ostream &os) {
  OwningOpRef<ModuleOp> lowered = lowerToEmitC(program, target);
  return success(lowered && succeeded(emitc::translateToCpp(*lowered, os)));
}
