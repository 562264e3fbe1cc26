// main() of the generated program: the model described to the runtime (its name, tp, vocab
// and arena; each parameter's HF shape and this rank's slice of it; a KV cache per attention
// layer; the EOS ids and the context length), what only the device needs (weight groups,
// attention bounds), the forwards, then the runtime's driver. Each is a call of tpcrt/calls.def
// (TPC_SPEC_CALL and the targets' own), built and checked as a forward's calls are.
#include "Lowering.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace tpc::tp;
using namespace tpc::target;
using namespace tpc::target::lowering;

namespace {

/// main()'s body as it is built: each call checked against calls.def, any mismatch an error
/// at the module.
class MainBuilder {
public:
  MainBuilder(OpBuilder b, ModuleOp module, const Spelling &spelling)
      : b(b), module(module), spelling(spelling) {}

  /// main()'s call `name`.
  Call call(StringRef name) { return Call(b, spelling, module, name, failed); }
  /// `name(spec, ...)`: every call after newSpec describes the spec it made.
  Call onSpec(StringRef name) { return call(name).value("spec", spec); }

  OpBuilder b;
  ModuleOp module;
  const Spelling &spelling;
  Value spec;
  bool failed = false;
};

/// This rank's slice of a parameter, as tpcrt::SliceSpec spells it.
std::string sliceOf(ParamOp param) {
  ShardDescAttr shard = param.getShardAttr();
  if (!shard)
    return "tpcrt::SliceSpec{}";
  std::string slice = "tpcrt::SliceSpec{" + std::to_string(shard.getDim()) + ", " +
                      braced(shard.getOffsets()) + ", " + braced(shard.getSizes()) + ", " +
                      std::to_string(shard.getChunks()) + ", 0";
  if (!shard.getRanks().empty()) // each rank's extent, padded to this local size
    slice += ", " + braced(shard.getRanks()) + ", " +
             std::to_string(param.getTensorType().getDimSize(shard.getDim()));
  return slice + "}";
}

std::string sourcesOf(ParamOp param) {
  std::string sources = "std::vector<std::string>{";
  llvm::ListSeparator sep(", ");
  if (ArrayAttr names = param.getSourcesAttr())
    for (Attribute source : names)
      sources += StringRef(sep).str() + quoted(cast<StringAttr>(source).getValue());
  return sources + "}";
}

/// The parameters (by index) the device lays one after the other: tp-group-linears' units
/// (a parameter is in one group at most, the same in both forwards).
std::vector<SmallVector<int64_t>> weightGroups(ArrayRef<ParamOp> params,
                                               ArrayRef<func::FuncOp> forwards) {
  llvm::DenseMap<StringAttr, int64_t> index;
  for (ParamOp param : params)
    index[param.getSymNameAttr()] = index.size();
  auto indexOf = [&](Value weight) {
    return index.lookup(weight.getDefiningOp<WeightOp>().getParamAttr().getAttr());
  };
  std::vector<SmallVector<int64_t>> groups;
  auto add = [&](SmallVector<int64_t> group) {
    if (group.size() > 1 && !llvm::is_contained(groups, group))
      groups.push_back(group);
  };
  for (func::FuncOp f : forwards)
    f.walk([&](FusedOp fused) {
      if (fused.getKind() != FusedKind::linears)
        return;
      SmallVector<int64_t> weights, biases;
      for (Operation &op : fused.getMembers()) {
        auto linear = cast<LinearOp>(op);
        weights.push_back(indexOf(linear.getWeight()));
        if (Value bias = linear.getBias())
          biases.push_back(indexOf(bias));
      }
      add(weights);
      add(biases);
    });
  return groups;
}

/// newSpec: the model's name, tp, vocab and arena, and whether the forwards return the last
/// token's row only. Fails where the call does not match calls.def: the rest of main() takes
/// the spec it returns.
LogicalResult newSpec(MainBuilder &m, StringRef name, int64_t tp, ArrayRef<func::FuncOp> forwards) {
  func::FuncOp plain = forwards.front();
  Value logits = plain.getBody().front().getTerminator()->getOperand(0);
  int64_t arena = 0;
  for (func::FuncOp f : forwards)
    arena = std::max(arena, f->getAttrOfType<IntegerAttr>(kArenaSizeAttrName).getInt());
  MLIRContext *ctx = m.b.getContext();
  m.spec = m.call("newSpec")
               .string("name", name)
               .integer("tp", tp)
               .integer("vocab", columns(logits))
               .integer("arenaPerToken", arena)
               .boolean("lastTokenOnly", typeOf(logits).getDimSize(0) == 1)
               .emit(emitc::PointerType::get(emitc::OpaqueType::get(ctx, "tpcrt::ModelSpec")));
  return success(m.spec != nullptr);
}

/// Parameters: their HF shapes and what this rank loads of them.
void addParams(MainBuilder &m, ArrayRef<ParamOp> params) {
  std::optional<WeightType> activation = weightTypeOf(getTarget(m.module).getActivation());
  for (ParamOp param : params) {
    SmallVector<int64_t> hfShape(param.getTensorType().getShape());
    if (ShardDescAttr shard = param.getShardAttr())
      hfShape.assign(shard.getHfShape().begin(), shard.getHfShape().end());
    Call add = m.onSpec("addParam");
    add.string("name", param.getSymName())
        .text("hfShape", "std::vector<int64_t>" + braced(hfShape))
        .text("slice", sliceOf(param))
        .text("sources", sourcesOf(param));
    // How the rank holds it, where that is not the activation type (the CPU's bf16 and f16
    // matrices; tp-weight-storage decided).
    WeightType held = param.getWeightType();
    if (held != activation)
      add.text("dtype", "tpcrt::DType::" + StringRef(stringifyWeightType(held)).upper());
    add.emit();
  }
}

/// One KV cache per attention layer (the plain forward's; the other has the same layers),
/// with its stage where the program has several.
void addKvCaches(MainBuilder &m, func::FuncOp plain, bool staged) {
  plain.walk([&](AttentionOp attention) {
    Call add = m.onSpec("addKvCache");
    add.integer("width", attention.getNumKvHeads() * attention.getHeadDim());
    if (std::optional<int64_t> valueHeadDim = attention.getValueHeadDim())
      add.integer("valueWidth", attention.getNumKvHeads() * *valueHeadDim);
    if (staged)
      add.integer("stage", stageOf(attention));
    // The keys it reads: the scheduler frees the blocks no later query reads.
    if (std::optional<int64_t> window = attention.getSlidingWindow())
      add.integer("window", *window);
    if (std::optional<int64_t> chunk = attention.getChunkSize())
      add.integer("chunk", *chunk);
    add.emit();
  });
}

/// The pipeline: how many stages, where the logits come from, and which stages hold each
/// parameter they do not all hold.
void describePipeline(MainBuilder &m, func::FuncOp plain, ArrayRef<ParamOp> params,
                      int64_t stages) {
  m.onSpec("setPipeline").integer("stages", stages).emit();
  TransferOp logits = returnedTransfer(plain);
  Call from = m.onSpec("setLogitsFrom");
  from.integer("stage", logits.getFrom());
  StringRef module = getModuleName(logits);
  module.empty() ? from.text("module", "nullptr") : from.string("module", module);
  from.emit();
  for (size_t i = 0; i < params.size(); ++i)
    if (DenseI64ArrayAttr held = ParamOp(params[i]).getStagesAttr();
        held && int64_t(held.size()) != stages)
      m.onSpec("setParamStages")
          .integer("param", int64_t(i))
          .text("stages", "std::vector<int64_t>" + braced(held.asArrayRef()))
          .emit();
}

/// What only a device that groups linears needs: the groups, and the bounds it sizes its
/// attention's scratch by.
void describeDevice(MainBuilder &m, ArrayRef<ParamOp> params, ArrayRef<func::FuncOp> forwards) {
  for (const SmallVector<int64_t> &group : weightGroups(params, forwards))
    m.onSpec("addWeightGroup").text("group", "std::vector<int>" + braced(group)).emit();
  int64_t maxHeads = 0, maxHeadDim = 0;
  func::FuncOp plain = forwards.front();
  plain.walk([&](AttentionOp attention) {
    maxHeads = std::max<int64_t>(maxHeads, attention.getNumHeads());
    maxHeadDim = std::max<int64_t>(maxHeadDim, attention.getHeadDim());
  });
  m.onSpec("setAttentionBounds")
      .integer("maxHeads", maxHeads)
      .integer("maxHeadDim", maxHeadDim)
      .emit();
}

/// What the compiler decided and the runtime obeys: the sequence-parallel forward's rule, the
/// KV cache's blocks, how uneven gathers cross the wire, and whether the ranks find a greedy
/// step's argmax.
void describeDecisions(MainBuilder &m, func::FuncOp plain, func::FuncOp split) {
  if (split)
    m.onSpec("setSequenceParallelTokens")
        .integer("tokens", *sequenceParallelTokens(split))
        .emit();
  if (auto blockSize = m.module->getAttrOfType<IntegerAttr>(kKvBlockSizeAttrName))
    m.onSpec("setKvBlockSize").integer("tokens", blockSize.getInt()).emit();
  m.onSpec("setVariableGathers")
      .boolean("variable", getTarget(m.module).getGather() == GatherMode::variable)
      .emit();
  bool argmaxOnRanks = false;
  plain.walk([&](AllGatherOp gather) { argmaxOnRanks |= gather.getArgmaxIfGreedy(); });
  plain.walk([&](TransferOp transfer) { argmaxOnRanks |= transfer.getArgmaxIfGreedy(); });
  m.onSpec("setArgmaxOnRanks").boolean("onRanks", argmaxOnRanks).emit();
}

} // namespace

LogicalResult tpc::target::lowering::lowerMain(ModuleOp module, const Spelling &spelling,
                                               StringRef name, int64_t tp, ArrayRef<ParamOp> params,
                                               func::FuncOp plain, func::FuncOp split,
                                               ArrayRef<std::string> stages, OpBuilder &mb) {
  MLIRContext *ctx = module.getContext();
  Type charPtrPtr =
      emitc::PointerType::get(emitc::PointerType::get(emitc::OpaqueType::get(ctx, "char")));
  auto mainType = FunctionType::get(ctx, {mb.getI32Type(), charPtrPtr}, {mb.getI32Type()});
  auto main = emitc::FuncOp::create(mb, module.getLoc(), "main", mainType);
  Block *entry = main.addEntryBlock();
  MainBuilder m(OpBuilder::atBlockEnd(entry), module, spelling);
  SmallVector<func::FuncOp> forwards{plain};
  if (split)
    forwards.push_back(split);

  if (failed(newSpec(m, name, tp, forwards)))
    return failure();
  addParams(m, params);
  if (!stages.empty())
    describePipeline(m, plain, params, int64_t(stages.size()));
  addKvCaches(m, plain, !stages.empty());
  if (auto eos = module->getAttrOfType<DenseI64ArrayAttr>(kEosTokenIdsAttrName))
    for (int64_t id : eos.asArrayRef())
      m.onSpec("addEosId").integer("id", id).emit();
  // The context the model was made for bounds the binary's default --max-model-len.
  if (auto positions = module->getAttrOfType<IntegerAttr>(kMaxPositionEmbeddingsAttrName))
    m.onSpec("setMaxPositions").integer("positions", positions.getInt()).emit();
  if (getTarget(module).getGroupLinears())
    describeDevice(m, params, forwards);
  describeDecisions(m, plain, split);
  m.onSpec("setForwards")
      .text("forward", stages.empty() ? plain.getSymName() : StringRef(stages.front()))
      .text("sequenceParallel", split ? split.getSymName() : "nullptr")
      .emit();
  for (size_t stage = 1; stage < stages.size(); ++stage)
    m.onSpec("setStageForward")
        .integer("stage", int64_t(stage))
        .text("forward", stages[stage])
        .emit();
  Value code = m.onSpec("runModel")
                   .value("argc", entry->getArgument(0))
                   .value("argv", entry->getArgument(1))
                   .emit(m.b.getI32Type());
  if (m.failed)
    return failure();
  emitc::ReturnOp::create(m.b, module.getLoc(), code);
  return success();
}
