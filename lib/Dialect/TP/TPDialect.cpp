// The tp dialect's registration and the attributes it verifies on foreign ops
// (the module's tp.mesh, a layer op's tp.strategy).
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/ErrorHandling.h"

#include <map>

using namespace mlir;
using namespace tpc::tp;

#include "TP/TPDialect.cpp.inc"

void TPDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "TP/TPOps.cpp.inc"
      >();
}

LogicalResult TPDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kMeshAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' belongs on the module, not on "
                             << op->getName();
    if (!isa<MeshAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a #tp.mesh, got " << attr.getValue();
    return success();
  }
  if (name == kStrategyAttrName) {
    if (!isa<StrategyAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a #tp.strategy, got "
                             << attr.getValue();
    return success();
  }
  if (name == kOperandLayoutsAttrName) {
    auto layouts = dyn_cast<ArrayAttr>(attr.getValue());
    if (!layouts || layouts.size() != op->getNumOperands() ||
        !llvm::all_of(layouts, [](Attribute a) { return isa<PlacementAttr>(a); }))
      return op->emitError() << "'" << name << "' must list one placement per operand";
    return success();
  }
  if (name == kOutputLayoutAttrName) {
    if (!isa<PlacementAttr>(attr.getValue()) || op->getNumResults() != 1)
      return op->emitError() << "'" << name << "' must be a placement on a one-result op";
    return success();
  }
  if (name == kHfModelTypeAttrName || name == kHfTiedAttrName || name == kHfTpPlanAttrName ||
      name == kEosTokenIdsAttrName || name == kHfBasePrefixAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' belongs on the module, not on "
                             << op->getName();
    bool ok = name == kHfTiedAttrName        ? isa<BoolAttr>(attr.getValue())
              : name == kEosTokenIdsAttrName ? isa<DenseI64ArrayAttr>(attr.getValue())
                                             : isa<StringAttr>(attr.getValue());
    if (!ok)
      return op->emitError() << "'" << name << "' must be "
                             << (name == kHfTiedAttrName        ? "a bool"
                                 : name == kEosTokenIdsAttrName ? "an array<i64: ...>"
                                                                : "a string")
                             << ", got " << attr.getValue();
    return success();
  }
  if (name == kMaxPositionEmbeddingsAttrName || name == kKvBlockSizeAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' belongs on the module, not on "
                             << op->getName();
    auto positions = dyn_cast<IntegerAttr>(attr.getValue());
    if (!positions || !positions.getType().isSignlessInteger(64) || positions.getInt() < 1)
      return op->emitError() << "'" << name << "' must be a positive i64, got "
                             << attr.getValue();
    return success();
  }
  if (name == kArenaAttrName) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || offsets.size() != int64_t(op->getNumResults()) ||
        llvm::any_of(offsets.asArrayRef(), [](int64_t o) { return o < 0; }))
      return op->emitError() << "'" << name
                             << "' must give one offset (>= 0) per result, got "
                             << attr.getValue();
    return success();
  }
  if (name == kArenaSizeAttrName || name == kSequenceParallelAttrName) {
    if (!isa<func::FuncOp>(op))
      return op->emitError() << "'" << name << "' belongs on a function, not on "
                             << op->getName();
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    bool ok = name == kArenaSizeAttrName
                  ? bool(value)
                  : value && value.getType().isSignlessInteger(64) && value.getInt() >= 1;
    if (!ok)
      return op->emitError() << "'" << name << "' must be "
                             << (name == kArenaSizeAttrName
                                     ? "an integer"
                                     : "a positive i64 (the token multiple it runs)")
                             << ", got " << attr.getValue();
    return success();
  }
  if (name == kTargetAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' belongs on the module, not on "
                             << op->getName();
    if (!isa<TargetAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a #tp.target, got "
                             << attr.getValue();
    return success();
  }
  if (name == kStageAttrName) {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!stage || !stage.getType().isSignlessInteger(64) || stage.getInt() < 0)
      return op->emitError() << "'" << name << "' must be a stage (an i64 >= 0), got "
                             << attr.getValue();
    auto module = op->getParentOfType<ModuleOp>();
    if (module && module->hasAttr(kMeshAttrName) &&
        stage.getInt() >= getPipelineStages(module))
      return op->emitError() << "'" << name << "' is stage " << stage.getInt()
                             << ", but the mesh has " << getPipelineStages(module)
                             << " stage" << (getPipelineStages(module) == 1 ? "" : "s");
    return success();
  }
  if (name == kStageLayersAttrName) {
    auto module = dyn_cast<ModuleOp>(op);
    if (!module)
      return op->emitError() << "'" << name << "' belongs on the module, not on "
                             << op->getName();
    auto layers = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!layers || int64_t(layers.size()) != getPipelineStages(module) ||
        llvm::any_of(layers.asArrayRef(), [](int64_t n) { return n < 1; }))
      return op->emitError() << "'" << name
                             << "' must give each stage of the mesh its layers (>= 1), got "
                             << attr.getValue();
    return success();
  }
  return op->emitError() << "unknown tp dialect attribute '" << name << "'";
}

int64_t tpc::tp::normalizeDim(int64_t dim, int64_t rank) {
  int64_t d = dim < 0 ? dim + rank : dim;
  return d >= 0 && d < rank ? d : -1;
}

bool tpc::tp::isSplitByTokens(Value value) {
  auto shard = dyn_cast_or_null<ShardAttr>(getPlacement(value));
  return shard && normalizeDim(shard.getDim(), rankOf(value)) == 0;
}

ParamOp tpc::tp::paramOf(Value value) {
  auto weight = value.getDefiningOp<WeightOp>();
  return weight ? SymbolTable::lookupNearestSymbolFrom<ParamOp>(weight, weight.getParamAttr())
                : ParamOp();
}

int64_t tpc::tp::splitDim(PlacementAttr placement) {
  if (auto shard = dyn_cast_or_null<ShardAttr>(placement))
    return shard.getDim();
  if (auto strided = dyn_cast_or_null<StridedShardAttr>(placement))
    return strided.getDim();
  return -1;
}

StringRef tpc::tp::getModuleName(Operation *op) {
  if (auto module = op->getAttrOfType<StringAttr>("module"))
    return module.getValue();
  return {};
}

PlacementAttr tpc::tp::getPlacement(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? dyn_cast_or_null<PlacementAttr>(tensor.getEncoding()) : PlacementAttr();
}

RankedTensorType tpc::tp::withPlacement(Type type, PlacementAttr placement) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(), tensor.getElementType(), placement);
}

TargetAttr tpc::tp::getTarget(ModuleOp module) {
  return module->getAttrOfType<TargetAttr>(kTargetAttrName);
}

FailureOr<TargetAttr> tpc::tp::requireTarget(ModuleOp module, StringRef pass) {
  if (TargetAttr target = getTarget(module))
    return target;
  module.emitError() << pass
                     << " needs the module's target (tp.target = #tp.target<...>): build the "
                        "program with tpc, or run tp-set-target first";
  return failure();
}

std::optional<int64_t> tpc::tp::sequenceParallelTokens(func::FuncOp forward) {
  if (auto multiple = forward->getAttrOfType<IntegerAttr>(kSequenceParallelAttrName))
    return multiple.getInt();
  return std::nullopt;
}

func::FuncOp tpc::tp::forwardFor(ModuleOp program, int64_t tokens, int64_t sequences) {
  func::FuncOp plain;
  for (auto forward : program.getOps<func::FuncOp>()) {
    std::optional<int64_t> multiple = sequenceParallelTokens(forward);
    if (!multiple)
      plain = forward;
    else if (sequences == 1 && tokens >= *multiple && tokens % *multiple == 0)
      return forward;
  }
  return plain;
}

bool tpc::tp::allReadsOf(ParamOp param, llvm::function_ref<bool(OpOperand &)> pred) {
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(param, param->getParentOp());
  if (!uses)
    return false;
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto weight = dyn_cast<WeightOp>(use.getUser());
    if (!weight || !llvm::all_of(weight->getUses(), pred))
      return false;
  }
  return true;
}

std::optional<WeightType> tpc::tp::weightTypeOf(Type elementType) {
  if (elementType.isF32())
    return WeightType::f32;
  if (elementType.isBF16())
    return WeightType::bf16;
  if (elementType.isF16())
    return WeightType::f16;
  return std::nullopt;
}

/// Elements and bytes of one block of `type` (of one element for the float types), as
/// tpcrt/types.def gives them for the ggml type the WeightType's name spells in upper case
/// (q4_k: Q4_K), so that the compiler's sizes are the runtime's.
static std::pair<int64_t, int64_t> blockOf(WeightType type) {
  StringRef name = stringifyWeightType(type);
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)                                              \
  if (name.equals_insensitive(#NAME))                                                          \
    return {ELEMENTS, BYTES};
#define TPC_HELD_TYPE TPC_TYPE
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
  // Not a switch the compiler checks for every case: a WeightType added without its line
  // fails here (and in the unit test), not with a size made up.
  llvm::report_fatal_error("tp.storage type '" + name + "' has no line in tpcrt/types.def");
}

double tpc::tp::bytesPerElement(WeightType type) {
  auto [elements, bytes] = blockOf(type);
  return double(bytes) / double(elements);
}

int64_t tpc::tp::blockElements(WeightType type) { return blockOf(type).first; }

bool tpc::tp::isQuantized(WeightType type) { return blockElements(type) > 1; }

bool tpc::tp::isHeldByCpu(WeightType type) {
  StringRef name = stringifyWeightType(type);
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)
#define TPC_HELD_TYPE(NAME, ID, ELEMENTS, BYTES, READS)                                         \
  if (name.equals_insensitive(#NAME))                                                          \
    return true;
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
  return false;
}

std::optional<int64_t> tpc::tp::getMeshSize(ModuleOp module) {
  if (auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttrName))
    return mesh.getSize();
  return std::nullopt;
}

int64_t tpc::tp::getPipelineStages(ModuleOp module) {
  auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttrName);
  return mesh ? mesh.getPp() : 1;
}

int64_t tpc::tp::stageOf(Operation *op) {
  if (auto fused = dyn_cast<FusedOp>(op))
    if (!fused.getBody().empty() && !fused.getBody().front().empty())
      op = &fused.getBody().front().front();
  auto stage = op->getAttrOfType<IntegerAttr>(kStageAttrName);
  return stage ? stage.getInt() : 0;
}

bool tpc::tp::inStage(ParamOp param, int64_t stage) {
  DenseI64ArrayAttr stages = param.getStagesAttr();
  return !stages || llvm::is_contained(stages.asArrayRef(), stage);
}

void tpc::tp::setStage(Operation *op, int64_t stage) {
  op->setAttr(kStageAttrName, IntegerAttr::get(IntegerType::get(op->getContext(), 64), stage));
}

void tpc::tp::placeWhereRead(Operation *op) {
  std::map<int64_t, SmallVector<OpOperand *>> byStage;
  for (OpOperand &use : op->getResult(0).getUses())
    byStage[stageOf(use.getOwner())].push_back(&use);
  if (byStage.empty()) {
    setStage(op, 0);
    return;
  }
  OpBuilder builder(op);
  bool first = true;
  for (auto &[stage, uses] : byStage) {
    Operation *copy = first ? op : builder.clone(*op);
    setStage(copy, stage);
    if (!first)
      for (OpOperand *use : uses)
        use->set(copy->getResult(0));
    first = false;
  }
}

std::optional<int64_t> tpc::tp::layerIndexOf(StringRef module) {
  // The last "layers.N" component: a wrapper may nest (model.language_model.layers.3).
  SmallVector<StringRef> parts;
  module.split(parts, '.');
  std::optional<int64_t> layer;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int64_t n;
    if (parts[i] == "layers" && !parts[i + 1].getAsInteger(10, n) && n >= 0)
      layer = n;
  }
  return layer;
}

FailureOr<int64_t> tpc::tp::requireMeshSize(ModuleOp module) {
  if (std::optional<int64_t> size = getMeshSize(module))
    return *size;
  module.emitError() << "no tp.mesh on the module: run tp-apply-plan first";
  return failure();
}

SmallVector<Operation *> tpc::tp::lastTokenChain(func::FuncOp forward) {
  SmallVector<Operation *> chain;
  if (forward.getBody().empty())
    return chain;
  auto ret = dyn_cast<func::ReturnOp>(forward.getBody().back().getTerminator());
  if (!ret || ret.getNumOperands() != 1)
    return chain;
  Value at = ret.getOperand(0);
  while (Operation *op = at.getDefiningOp()) {
    if (!isa<LinearOp, RMSNormOp, SiluOp, GeluOp, SoftcapOp, ScaleOp, IdentityOp>(op) || !at.hasOneUse() ||
        typeOf(at).getRank() != 2)
      break;
    chain.push_back(op);
    at = op->getOperand(0);
  }
  if (typeOf(at).getRank() != 2)
    chain.clear();
  return chain;
}

LinearOp tpc::tp::headProjection(Value operand, SmallVectorImpl<Operation *> *between) {
  while (Operation *op = operand.getDefiningOp()) {
    if (auto rotary = dyn_cast<RotaryOp>(op))
      operand = rotary.getInput();
    else if (auto norm = dyn_cast<RMSNormOp>(op); norm && norm.getHeadDim())
      operand = norm.getInput();
    else if (auto l2 = dyn_cast<L2NormOp>(op)) // Llama 4's q/k norm, per head
      operand = l2.getInput();
    else
      break;
    if (between)
      between->push_back(op);
  }
  return operand.getDefiningOp<LinearOp>();
}
