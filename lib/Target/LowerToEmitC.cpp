// tp-lower-to-emitc: a partitioned tp program whose decisions are in the IR (collectives
// elided at tp 1, fused units, grouped linears, arena offsets) becomes EmitC: one call into
// the runtime per op, with the op's placement spelled out in its arguments. Nothing is decided
// here; what a target spells differently comes from its Spelling (include/tpc/Target). This
// file walks the forwards and hands each op to the patterns of its family (Lowering/).
#include "Lowering/Lowering.h"

#include "tpc/Dialect/TP/RepeatedDiagnostics.h"
#include "tpc/Target/Passes.h"
#include "tpc/Target/TargetInfo.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/StringExtras.h"

namespace tpc::target {
#define GEN_PASS_DEF_TPLOWERTOEMITC
#define GEN_PASS_DEF_TPSETTARGET
#include "TP/TargetPasses.h.inc"
} // namespace tpc::target

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;
using namespace tpc::target;
using namespace tpc::target::lowering;

PlacementAttr lowering::placementOf(Value v) {
  PlacementAttr p = getPlacement(v);
  return p ? p : ReplicateAttr::get(v.getContext());
}

std::string lowering::quoted(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string lowering::braced(ArrayRef<int64_t> values) {
  std::string s = "{";
  llvm::ListSeparator sep(", ");
  for (int64_t v : values)
    s += StringRef(sep).str() + std::to_string(v);
  return s + "}";
}

std::string lowering::blocksOf(PlacementAttr p, int64_t global) {
  if (auto strided = dyn_cast<StridedShardAttr>(p))
    return braced(strided.getBlocks());
  return braced({global});
}

//===----------------------------------------------------------------------------------===//
// One forward
//===----------------------------------------------------------------------------------===//

FunctionLowering::FunctionLowering(func::FuncOp func, const Spelling &spelling,
                                   llvm::DenseMap<StringAttr, int64_t> &paramIndex, int64_t tp,
                                   OpBuilder &moduleBuilder, std::optional<int64_t> stage)
    : spelling(spelling), ctx(func.getContext()), builder(ctx), func(func), stage(stage),
      emittedName(stage ? "forward_stage" + std::to_string(*stage) : func.getSymName().str()),
      paramIndex(paramIndex), tp(tp), moduleBuilder(moduleBuilder) {}

bool FunctionLowering::runsHere(Operation *op) {
  if (!stage)
    return true;
  if (auto transfer = dyn_cast<TransferOp>(op))
    return transfer.getFrom() == *stage || (transfer.getTo() == *stage && !returned(transfer));
  // The forward's result arrives at the first stage through the engine (returnedTransfer).
  if (isa<func::ReturnOp>(op))
    return false;
  return stageOf(op) == *stage;
}

TransferOp lowering::returnedTransfer(func::FuncOp func) {
  Operation *ret = func.getBody().front().getTerminator();
  if (ret->getNumOperands() != 1)
    return TransferOp();
  return ret->getOperand(0).getDefiningOp<TransferOp>();
}

bool FunctionLowering::returned(TransferOp transfer) { return returnedTransfer(func) == transfer; }

Type FunctionLowering::idsType() { return emitc::PointerType::get(opaque("const int64_t")); }
Type FunctionLowering::actPtr() { return emitc::PointerType::get(opaque(spelling.element())); }
Type FunctionLowering::constActPtr() {
  return emitc::PointerType::get(opaque(("const " + spelling.element()).str()));
}

LogicalResult FunctionLowering::lower() {
  Location loc = func.getLoc();
  auto type = FunctionType::get(ctx, {contextType(), idsType(), idsType(), i64()}, {actPtr()});
  auto lowered = emitc::FuncOp::create(moduleBuilder, loc, emittedName, type);
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
  if (stage && !returnedTransfer(func))
    return func.emitError() << "has pipeline stages but does not end by sending its result to "
                               "the first stage: run tp-insert-transfers";
  // Kernels of fused units go before the function, in the module.
  kernelPoint = lowered;
  Operation *ret = func.getBody().front().getTerminator();
  for (Operation &op : func.getBody().front())
    if (runsHere(&op) && (failed(lowerOp(&op)) || mismatchedCall))
      return failure();
  // A stage's function returns nothing: the engine receives the logits the last one sends.
  if (!runsHere(ret)) {
    Value none = emitc::LiteralOp::create(builder, loc, actPtr(), "nullptr");
    emitc::ReturnOp::create(builder, loc, none);
  }
  return success();
}

LogicalResult FunctionLowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  if (failed(spelling.supports(op)))
    return failure();
  if (auto weight = dyn_cast<WeightOp>(op)) {
    auto index = paramIndex.find(weight.getParamAttr().getAttr());
    if (index == paramIndex.end())
      return op->emitError() << "reads no tp.param";
    // A weight held in another type than the activations' (tp-weight-storage: the CPU's
    // bf16 and f16 matrices) is handed over with its type, to the kernels that read it so.
    auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(op, weight.getParamAttr());
    if (param && weightTypeOf(getTarget(op->getParentOfType<ModuleOp>()).getActivation()) !=
                     param.getWeightType()) {
      Type matrix = opaque((spelling.ns() + "::ProgramMatrix").str());
      bind(weight.getResult(), call(op, "matrix").integer("i", index->second).emit(matrix));
      return success();
    }
    bind(weight.getResult(), call(op, "weight").integer("i", index->second).emit(constActPtr()));
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
    return lowerFused(*this, fused);
  for (auto family : {lowerLayer, lowerCommunication})
    if (std::optional<LogicalResult> lowered = family(*this, op))
      return *lowered;
  return unsupported(op, op->getName().getStringRef().str());
}

LogicalResult FunctionLowering::lowerInto(Operation *op, StringRef name,
                                          llvm::function_ref<void(Call &, Value)> fill) {
  FailureOr<Value> out = define(op);
  if (failed(out))
    return failure();
  Call c = call(op, name);
  fill(c, *out);
  c.emit();
  return success();
}

Value FunctionLowering::ref(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getArgNumber() == 0 ? ids : positions;
  return values.lookup(v);
}

FailureOr<Value> FunctionLowering::define(Operation *op, Value result, unsigned i) {
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(kArenaAttrName);
  if (!offsets || offsets.size() <= int64_t(i))
    return op->emitError() << "has no arena offset: run tp-plan-arena before lowering";
  Value slot = call(op, "slot").integer("offset", offsets[i]).value("n", n).emit(actPtr());
  values[result] = slot;
  return slot;
}

FailureOr<SmallVector<Value>> FunctionLowering::defineAll(Operation *op) {
  SmallVector<Value> outs;
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    FailureOr<Value> out = define(op, result, i);
    if (failed(out))
      return failure();
    outs.push_back(*out);
  }
  return outs;
}

Rows FunctionLowering::rowsOf(Value v) {
  int64_t tokens = typeOf(v).getDimSize(0);
  // A forward's only static rows are the one row per sequence that tp.last_token leaves:
  // at run time, one for each sequence the step samples.
  if (tokens == 1 && sampled)
    return {sampled, 0};
  if (!ShapedType::isDynamic(tokens))
    return {Value(), tokens};
  return {isSplitByTokens(v) ? ns : n, 0};
}

Args &FunctionLowering::addRows(Args &a, Value v) {
  Rows rows = rowsOf(v);
  return rows.count ? a.value(rows.count) : a.integer(rows.fixed);
}

LogicalResult FunctionLowering::unsupported(Operation *op, const Twine &what) {
  return op->emitError() << "the " << spelling.name() << " target cannot run " << what << " yet";
}

Value FunctionLowering::biasOf(LinearOp linear) {
  Value b = linear.getBias();
  if (!b)
    return Value();
  if (!isa<PartialAttr>(placementOf(linear.getResult())))
    return ref(b);
  return call(linear, "onRankZero").value("bias", ref(b)).emit(constActPtr());
}

Value FunctionLowering::positionsOf(Operation *op, Value input) {
  if (!isSplitByTokens(input))
    return positions;
  return call(op, "localPositions")
      .value("positions", positions)
      .value("perRank", ns)
      .emit(idsType());
}

Value FunctionLowering::invFreqOf(RotaryOp rotary) {
  SmallVector<double> frequencies = rotary.getFrequencies();
  int64_t count = int64_t(frequencies.size());
  auto type = emitc::ArrayType::get({count}, builder.getF64Type());
  std::string &name = frequencyTables[std::vector<double>(frequencies.begin(), frequencies.end())];
  if (!name.empty())
    return emitc::GetGlobalOp::create(builder, rotary.getLoc(), type, name);
  name = (emittedName + "_inv_freq_" + Twine(frequencyTables.size() - 1)).str();
  OpBuilder::InsertionGuard guard(moduleBuilder);
  moduleBuilder.setInsertionPoint(kernelPoint);
  auto values = DenseElementsAttr::get(RankedTensorType::get({count}, builder.getF64Type()),
                                       ArrayRef<double>(frequencies));
  emitc::GlobalOp::create(moduleBuilder, rotary.getLoc(), name, type, values,
                          /*externSpecifier=*/false, /*staticSpecifier=*/true,
                          /*constSpecifier=*/true);
  return emitc::GetGlobalOp::create(builder, rotary.getLoc(), type, name);
}

void FunctionLowering::addKernel(const std::string &text) {
  OpBuilder::InsertionGuard guard(moduleBuilder);
  moduleBuilder.setInsertionPoint(kernelPoint);
  emitc::VerbatimOp::create(moduleBuilder, func.getLoc(), text);
}

std::string FunctionLowering::kernelName() {
  return (emittedName + "_fused_" + Twine(kernels++)).str();
}

//===----------------------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------------------===//

namespace {

struct TPLowerToEmitCPass : tpc::target::impl::TPLowerToEmitCBase<TPLowerToEmitCPass> {
  using TPLowerToEmitCBase::TPLowerToEmitCBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<TargetAttr> target = requireTarget(module, "tp-lower-to-emitc");
    if (failed(target))
      return signalPassFailure();
    const TargetInfo *info = targetOf(*target);
    if (!info) {
      module.emitError() << "tp.target names '" << target->getName()
                         << "', which this tpc does not know; the targets are "
                         << llvm::join(targetNames(), ", ");
      return signalPassFailure();
    }
    if (failed(lower(module, *info->spelling())))
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
    int64_t pp = getPipelineStages(module);
    if (pp > 1 && split)
      return module.emitError() << "the " << spelling.name()
                                << " target runs pipeline stages of one forward, not a "
                                   "sequence-parallel one beside it";
    SmallVector<std::string> stages;
    for (func::FuncOp f : {plain, split}) {
      if (!f)
        continue;
      if (!f->hasAttr(kArenaSizeAttrName))
        return f.emitError() << "has no arena: run tp-plan-arena before lowering";
      if (pp == 1) {
        if (failed(FunctionLowering(f, spelling, paramIndex, tp, mb).lower()))
          return failure();
        continue;
      }
      // A function per stage, from the one forward: each rank runs its stage's.
      for (int64_t stage = 0; stage < pp; ++stage) {
        FunctionLowering lowering(f, spelling, paramIndex, tp, mb, stage);
        if (failed(lowering.lower()))
          return failure();
        stages.push_back(lowering.name());
      }
    }
    if (failed(lowering::lowerMain(module, spelling, name, tp, params, plain, split, stages, mb)))
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
      "const int64_t f = i % " + half + ", head = i / " + half + " % " + heads + ", r = i / " +
          half + " / " + heads + ";",
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

std::string tpc::target::literalList(ArrayRef<double> values, std::string (*literal)(double)) {
  std::string list;
  llvm::ListSeparator sep(", ");
  for (double v : values)
    list += StringRef(sep).str() + literal(v);
  return list;
}

std::string tpc::target::doubleLiteral(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%a", v);
  return buffer;
}

OwningOpRef<ModuleOp> tpc::target::lowerToEmitC(ModuleOp program) {
  tp::RepeatedDiagnosticHandler onePerCause(program.getContext());
  OwningOpRef<ModuleOp> copy = program.clone();
  PassManager pm(program.getContext());
  pm.addPass(createTPLowerToEmitC());
  if (failed(pm.run(*copy)))
    return nullptr;
  return copy;
}

LogicalResult tpc::target::emitSource(ModuleOp program, raw_ostream &os) {
  OwningOpRef<ModuleOp> lowered = lowerToEmitC(program);
  return success(lowered && succeeded(emitc::translateToCpp(*lowered, os)));
}

namespace {

struct TPSetTargetPass : tpc::target::impl::TPSetTargetBase<TPSetTargetPass> {
  using TPSetTargetBase::TPSetTargetBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const TargetInfo *info = findTarget(target);
    if (!info) {
      module.emitError() << "unknown target '" << target << "'; the targets are "
                         << llvm::join(targetNames(), ", ");
      return signalPassFailure();
    }
    module->setAttr(kTargetAttrName, info->describe(module.getContext()));
  }
};

} // namespace
