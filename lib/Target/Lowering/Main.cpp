// main() of the generated program: the model described to the runtime (its name, tp, vocab
// and arena; each parameter's HF shape and this rank's slice of it; a KV cache per attention
// layer; the EOS ids and the context length), what only the device needs (weight groups,
// attention bounds), the forwards, then the runtime's driver.
#include "Lowering.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace tpc::tp;
using namespace tpc::target;
using namespace tpc::target::lowering;

namespace {

/// main()'s body as it is built: each call takes the spec first.
class MainBuilder {
public:
  MainBuilder(OpBuilder b, Location loc) : b(b), loc(loc), ctx(b.getContext()) {}

  Value call(StringRef callee, Args &a, Type result = {}) {
    return emitCall(b, loc, callee, a, result);
  }
  /// `callee(spec, ...)`, the rest of the arguments from `fill`.
  Value onSpec(StringRef callee, llvm::function_ref<void(Args &)> fill, Type result = {}) {
    Args a(ctx);
    a.value(spec);
    fill(a);
    return call(callee, a, result);
  }

  OpBuilder b;
  Location loc;
  MLIRContext *ctx;
  Value spec;
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

} // namespace

LogicalResult tpc::target::lowering::lowerMain(ModuleOp module, const Spelling &spelling,
                                               StringRef name, int64_t tp, ArrayRef<ParamOp> params,
                                               func::FuncOp plain, func::FuncOp split,
                                               OpBuilder &mb) {
  MLIRContext *ctx = module.getContext();
  Location loc = module.getLoc();
  Type charPtrPtr =
      emitc::PointerType::get(emitc::PointerType::get(emitc::OpaqueType::get(ctx, "char")));
  auto mainType = FunctionType::get(ctx, {mb.getI32Type(), charPtrPtr}, {mb.getI32Type()});
  auto main = emitc::FuncOp::create(mb, loc, "main", mainType);
  Block *entry = main.addEntryBlock();
  MainBuilder m(OpBuilder::atBlockEnd(entry), loc);
  auto inTarget = [&](StringRef callee) { return (spelling.ns() + "::" + callee).str(); };
  SmallVector<func::FuncOp> forwards{plain};
  if (split)
    forwards.push_back(split);

  Value logits = plain.getBody().front().getTerminator()->getOperand(0);
  int64_t arena = 0;
  for (func::FuncOp f : forwards)
    arena = std::max(arena, f->getAttrOfType<IntegerAttr>(kArenaSizeAttrName).getInt());
  Args s(ctx);
  s.string(name)
      .integer(tp)
      .integer(columns(logits))
      .integer(arena)
      .boolean(typeOf(logits).getDimSize(0) == 1);
  m.spec = m.call("tpcrt::newSpec", s,
                  emitc::PointerType::get(emitc::OpaqueType::get(ctx, "tpcrt::ModelSpec")));

  // Parameters: their HF shapes and what this rank loads of them.
  for (ParamOp param : params) {
    SmallVector<int64_t> hfShape(param.getTensorType().getShape());
    if (ShardDescAttr shard = param.getShardAttr())
      hfShape.assign(shard.getHfShape().begin(), shard.getHfShape().end());
    // How the rank holds it, where that is not the activation type (the CPU's bf16 and f16
    // matrices; tp-weight-storage decided).
    WeightType held = param.getWeightType();
    bool ownType = weightTypeOf(getTarget(module).getActivation()) != held;
    m.onSpec("tpcrt::addParam", [&](Args &a) {
      a.string(param.getSymName())
          .text("std::vector<int64_t>" + braced(hfShape))
          .text(sliceOf(param))
          .text(sourcesOf(param));
      if (ownType)
        a.text("tpcrt::DType::" + llvm::StringRef(stringifyWeightType(held)).upper());
    });
  }
  // One KV cache per attention layer (the plain forward's; the other has the same layers).
  int64_t maxHeads = 0, maxHeadDim = 0;
  plain.walk([&](AttentionOp attention) {
    m.onSpec("tpcrt::addKvCache", [&](Args &a) {
      a.integer(attention.getNumKvHeads() * attention.getHeadDim());
      if (std::optional<int64_t> valueHeadDim = attention.getValueHeadDim())
        a.integer(attention.getNumKvHeads() * *valueHeadDim);
    });
    maxHeads = std::max<int64_t>(maxHeads, attention.getNumHeads());
    maxHeadDim = std::max<int64_t>(maxHeadDim, attention.getHeadDim());
  });
  if (auto eos = module->getAttrOfType<DenseI64ArrayAttr>(kEosTokenIdsAttrName))
    for (int64_t id : eos.asArrayRef())
      m.onSpec("tpcrt::addEosId", [&](Args &a) { a.integer(id); });
  // The context the model was made for bounds the binary's default --max-seq-len.
  if (auto positions = module->getAttrOfType<IntegerAttr>(kMaxPositionEmbeddingsAttrName))
    m.onSpec("tpcrt::setMaxPositions", [&](Args &a) { a.integer(positions.getInt()); });
  if (getTarget(module).getGroupLinears()) {
    for (const SmallVector<int64_t> &group : weightGroups(params, forwards))
      m.onSpec(inTarget("addWeightGroup"),
               [&](Args &a) { a.text("std::vector<int>" + braced(group)); });
    m.onSpec(inTarget("setAttentionBounds"),
             [&](Args &a) { a.integer(maxHeads).integer(maxHeadDim); });
  }
  // What the compiler decided and the runtime obeys: the sequence-parallel forward's rule
  // and how uneven gathers cross the wire.
  if (split)
    m.onSpec("tpcrt::setSequenceParallelTokens", [&](Args &a) {
      a.integer(*sequenceParallelTokens(split));
    });
  if (auto blockSize = module->getAttrOfType<IntegerAttr>(kKvBlockSizeAttrName))
    m.onSpec("tpcrt::setKvBlockSize", [&](Args &a) { a.integer(blockSize.getInt()); });
  m.onSpec("tpcrt::setVariableGathers", [&](Args &a) {
    a.boolean(getTarget(module).getGather() == GatherMode::variable);
  });
  m.onSpec(inTarget("setForwards"), [&](Args &a) {
    a.text(plain.getSymName()).text(split ? split.getSymName() : "nullptr");
  });
  Value code = m.onSpec(
      inTarget("runModel"),
      [&](Args &a) { a.value(entry->getArgument(0)).value(entry->getArgument(1)); },
      m.b.getI32Type());
  emitc::ReturnOp::create(m.b, loc, code);
  return success();
}
