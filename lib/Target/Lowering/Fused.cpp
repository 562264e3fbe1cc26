// The patterns of tp.fused units: an elementwise chain (and the norm after it) or a rotary
// pair becomes a kernel generated here, wrapped by the target's Spelling and called with the
// signature Target.h gives; grouped linears become one GEMM over their adjacent weights for
// one row, one runtime linear each for more.
#include "Lowering.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace tpc::tp;
using namespace tpc::target;
using namespace tpc::target::lowering;

namespace {

/// One line of a fused chain: `def`'s value from its operands' names.
std::string chainLine(Operation *def, ArrayRef<std::string> a) {
  if (isa<SiluOp>(def))
    return "silu(" + a[0] + ")";
  if (auto gelu = dyn_cast<GeluOp>(def))
    return (gelu.getApproximate() == "tanh" ? "geluTanh(" : "gelu(") + a[0] + ")";
  if (auto scale = dyn_cast<ScaleOp>(def))
    return a[0] + " * acc(" + doubleLiteral(scale.getFactor().convertToDouble()) + ")";
  if (auto cap = dyn_cast<SoftcapOp>(def))
    return "softcap(" + a[0] + ", acc(" + doubleLiteral(cap.getCap().convertToDouble()) + "))";
  return a[0] + (isa<AddOp>(def) ? " + " : " * ") + a[1];
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
    std::string expr;
    if (def && def->getParentOp() == fused) {
      SmallVector<std::string> a;
      for (Value operand : def->getOperands())
        a.push_back(valueOf(operand));
      expr = chainLine(def, a);
      code.what +=
          StringRef(code.what.empty() ? "" : ", ").str() + def->getName().stripDialect().str();
    } else {
      inputs.insert(v);
      expr = "load(in" + std::to_string(inputs.size() - 1) + ", i)";
    }
    std::string name = "x" + std::to_string(code.lines.size());
    code.lines.push_back("const acc " + name + " = " + expr + ";");
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

/// An elementwise chain, or a chain and the rms_norm of its value: NAME(cx, rows, in0..,
/// [weight,] out..).
LogicalResult lowerChain(FunctionLowering &l, FusedOp fused, StringRef name) {
  SmallVector<Operation *> members(llvm::make_pointer_range(fused.getMembers()));
  auto norm = dyn_cast<RMSNormOp>(members.back());
  Operation *root = members[members.size() - (norm ? 2 : 1)];
  llvm::SetVector<Value> inputs;
  ChainCode chain = chainCode(fused, root->getResult(0), inputs);
  Value stored = fused.getResult(0);
  if (norm)
    l.addKernel(l.spelling.normKernel(
        name, chain, columns(stored), norm.getHeadDim() ? *norm.getHeadDim() : columns(stored),
        norm.getEpsilon().convertToDouble(), norm.getWeightOffset().convertToDouble()));
  else
    l.addKernel(l.spelling.elementwiseKernel(name, chain, columns(stored)));
  FailureOr<SmallVector<Value>> outs = l.defineAll(fused);
  if (failed(outs))
    return failure();
  Args a = Args(l.ctx).value(l.cx);
  l.addRows(a, stored);
  for (Value in : inputs)
    a.value(l.ref(in));
  if (norm)
    a.value(l.ref(norm.getWeight()));
  for (Value out : *outs)
    a.value(out);
  l.callOpaque(fused.getLoc(), name, a);
  return success();
}

/// A query's and a key's rotary: NAME(cx, rows, a, aOut, b, bOut, positions).
LogicalResult lowerRotaryPair(FunctionLowering &l, FusedOp fused, StringRef name) {
  SmallVector<Operation *> members(llvm::make_pointer_range(fused.getMembers()));
  auto first = cast<RotaryOp>(members[0]), second = cast<RotaryOp>(members[1]);
  int64_t headDim = first.getHeadDim(), half = headDim / 2;
  SmallVector<double> frequencies = first.getFrequencies();
  if (int64_t(frequencies.size()) != half)
    return first.emitError() << "rotary inv_freq has " << frequencies.size()
                             << " values for a head_dim of " << headDim;
  double scaling = first.getScaling() ? first.getScaling()->convertToDouble() : 1.0;
  l.addKernel(l.spelling.rotaryKernel(name, headDim, columns(first.getInput()) / headDim,
                                      columns(second.getInput()) / headDim, frequencies, scaling));
  FailureOr<SmallVector<Value>> outs = l.defineAll(fused);
  if (failed(outs))
    return failure();
  Args a = Args(l.ctx).value(l.cx);
  l.addRows(a, first.getInput())
      .value(l.ref(first.getInput()))
      .value((*outs)[0])
      .value(l.ref(second.getInput()))
      .value((*outs)[1])
      .value(l.positionsOf(fused, first.getInput()));
  l.callOpaque(fused.getLoc(), name, a);
  return success();
}

/// Linears of one input: one GEMM over their adjacent weights for one row; one GEMM each
/// for more rows (where each member's output block is [rows, its columns]).
LogicalResult lowerLinears(FunctionLowering &l, FusedOp fused) {
  if (!l.spelling.groupsLinears())
    return fused.emitError() << "the " << l.spelling.name()
                             << " target keeps each weight in its own buffer: it runs no "
                                "grouped linears (leave out tp-group-linears)";
  SmallVector<LinearOp> members;
  for (Operation &op : fused.getMembers())
    members.push_back(cast<LinearOp>(op));
  FailureOr<SmallVector<Value>> outs = l.defineAll(fused);
  if (failed(outs))
    return failure();
  int64_t total = 0;
  for (auto [linear, out, result] : llvm::zip(members, *outs, fused.getResults())) {
    l.bind(linear.getResult(), out);
    total += columns(result);
  }
  Value input = members.front().getInput();
  auto one = [&](LinearOp linear, Value out, bool whole) {
    Call c = l.call(fused, "linear");
    c.value("x", l.ref(input));
    whole ? c.integer("rows", 1) : c.rows("rows", input);
    c.integer("cols", columns(input))
        .value("w", l.ref(linear.getWeight()))
        .integer("outCols", whole ? total : columns(linear.getResult()))
        .pointer("bias", linear.getBias() ? l.ref(linear.getBias()) : Value())
        .value("out", out);
    c.emit();
  };
  auto each = [&] {
    for (auto [linear, out] : llvm::zip(members, *outs))
      one(linear, out, /*whole=*/false);
  };
  Rows rows = l.rowsOf(input);
  if (!rows.count) {
    rows.fixed == 1 ? one(members.front(), outs->front(), /*whole=*/true) : each();
    return success();
  }
  // Rows known at run time only: the one-row GEMM where there is one.
  OpBuilder &b = l.builder;
  Location loc = fused.getLoc();
  auto oneRow = emitc::ConstantOp::create(b, loc, l.i64(), b.getI64IntegerAttr(1));
  auto isOne =
      emitc::CmpOp::create(b, loc, b.getI1Type(), emitc::CmpPredicate::eq, rows.count, oneRow);
  auto branch = emitc::IfOp::create(b, loc, isOne, /*addThenBlock=*/true, /*addElseBlock=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
  one(members.front(), outs->front(), /*whole=*/true);
  emitc::YieldOp::create(b, loc);
  b.setInsertionPointToStart(&branch.getElseRegion().front());
  each();
  emitc::YieldOp::create(b, loc);
  return success();
}

} // namespace

LogicalResult tpc::target::lowering::lowerFused(FunctionLowering &l, FusedOp fused) {
  switch (fused.getKind()) {
  case FusedKind::linears:
    return lowerLinears(l, fused);
  case FusedKind::rotary:
    return lowerRotaryPair(l, fused, l.kernelName());
  case FusedKind::elementwise:
  case FusedKind::norm:
    return lowerChain(l, fused, l.kernelName());
  }
  llvm_unreachable("a tp.fused kind without a pattern");
}
