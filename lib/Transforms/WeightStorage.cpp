// tp-weight-storage: the type the binary holds each weight in. Decode streams every weight
// once per token, so bytes per weight are the speed; the CPU target keeps the checkpoint's
// bf16 and f16 matrices as they are (its linear and embedding kernels widen them in
// registers) and holds what other kernels read as fp32, the GPU target holds everything in
// its activation type. The decision is written on each tp.param, where the loader, the
// lowering and `tpc analyze` read it.
#include "tpc/Transforms/Passes.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>

namespace tpc::tp {
#define GEN_PASS_DEF_TPWEIGHTSTORAGE
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

/// Whether every use of the parameter `param` (through its tp.weight ops) is one that a
/// matrix kernel reads in its stored type: a linear's weight or an embedding's table.
bool readAsMatrix(ParamOp param) {
  return allReadsOf(param, [](OpOperand &read) {
    auto linear = dyn_cast<LinearOp>(read.getOwner());
    auto embedding = dyn_cast<EmbeddingOp>(read.getOwner());
    return (linear && read.get() == linear.getWeight()) ||
           (embedding && read.get() == embedding.getTable());
  });
}

/// Whether every rank's piece of `param` (quantized in blocks of `block` elements) is whole
/// blocks: true unless its split runs along the rows of blocks (the last, input, dimension)
/// and a piece begins, ends or is padded inside a block.
bool splitOnBlocks(ParamOp param, int64_t block) {
  ShardDescAttr shard = param.getShardAttr();
  if (!shard)
    return true;
  int64_t last = int64_t(shard.getHfShape().size()) - 1;
  if (shard.getDim() != last)
    return true;
  auto aligned = [&](int64_t n) { return n % block == 0; };
  if (ArrayRef<int64_t> ranks = shard.getRanks(); !ranks.empty()) {
    int64_t extent = 0;
    for (size_t r = 0; r + 1 < ranks.size(); r += 2) {
      if (!aligned(ranks[r]) || !aligned(ranks[r + 1]))
        return false;
      extent = std::max(extent, ranks[r + 1]);
    }
    return aligned(extent);
  }
  for (auto [offset, size] : llvm::zip(shard.getOffsets(), shard.getSizes())) {
    int64_t piece = (size + shard.getChunks() - 1) / shard.getChunks();
    if (!aligned(offset) || !aligned(size) || !aligned(piece))
      return false;
  }
  return true;
}

/// The tp sizes up to 16 whose even split of `size` elements keeps whole blocks.
std::string blockAlignedTpSizes(int64_t size, int64_t block) {
  std::string sizes;
  for (int64_t tp = 1; tp <= 16; ++tp)
    if (size % block == 0 && ((size + tp - 1) / tp) % block == 0)
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(tp);
  return sizes.empty() ? "none" : sizes;
}

/// Parameters of one kind that fall back to bf16, said once for all of them (a model's
/// layers repeat the same weights).
struct Fallback {
  std::vector<ParamOp> params;
  double storedBytes = 0, heldBytes = 0;
};

struct TPWeightStoragePass : tpc::tp::impl::TPWeightStorageBase<TPWeightStoragePass> {
  using TPWeightStorageBase::TPWeightStorageBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<WeightType> asked;
    std::string name = weights;
    if (name != "stored") {
      asked = symbolizeWeightType(name == "fp32" ? "f32" : name == "fp16" ? "f16" : name);
      if (!asked || (isQuantized(*asked) && *asked != WeightType::q8_0 &&
                     *asked != WeightType::q4_0)) {
        module.emitError() << "--weights-dtype " << weights
                           << " is not a weight type tpc holds weights in: stored, f32, bf16, "
                              "f16, or q8_0 and q4_0 (quantized at load)";
        return signalPassFailure();
      }
    }
    FailureOr<TargetAttr> target = requireTarget(module, getArgument());
    if (failed(target))
      return signalPassFailure();
    std::optional<WeightType> activation = weightTypeOf((*target).getActivation());
    // Block types whose split would cut blocks: held in bf16, said once per type. (Every
    // block type has kernels: isHeldByCpu, which the unit tests check.)
    std::map<std::string, Fallback> cutBlocks;
    auto elementsOf = [](ParamOp param) { return double(param.getTensorType().getNumElements()); };
    for (ParamOp param : module.getOps<ParamOp>()) {
      WeightType held = WeightType::f32;
      if (activation != WeightType::f32) {
        held = activation.value_or(WeightType::f32);
      } else if (readAsMatrix(param)) {
        held = asked.value_or(param.getWeightType());
        if (isQuantized(held)) {
          WeightType stored = held;
          if (!isHeldByCpu(held)) { // a tp.storage type added without its kernels
            param.emitError() << "the CPU target has no kernels for "
                              << stringifyWeightType(held)
                              << " (not a held type of tpcrt/types.def)";
            return signalPassFailure();
          }
          if (!splitOnBlocks(param, blockElements(held))) {
            held = WeightType::bf16;
            Fallback &fallback = cutBlocks[stringifyWeightType(stored).str()];
            fallback.params.push_back(param);
            fallback.storedBytes += elementsOf(param) * bytesPerElement(stored);
            fallback.heldBytes += elementsOf(param) * bytesPerElement(held);
          }
        }
      }
      std::optional<WeightType> element = weightTypeOf(param.getTensorType().getElementType());
      if (element == held)
        param.removeStorageAttr();
      else
        param.setStorage(held);
    }
    auto megabytes = [](double bytes) { return llvm::formatv("{0:F1} MB", bytes / 1e6).str(); };
    for (auto &[type, fallback] : cutBlocks) {
      ParamOp first = fallback.params.front();
      ShardDescAttr shard = first.getShardAttr();
      int64_t block = blockElements(*symbolizeWeightType(type));
      int64_t size = shard.getHfShape().back();
      first.emitWarning() << fallback.params.size() << " " << type << " weight"
                          << (fallback.params.size() == 1 ? "" : "s") << " ("
                          << first.getSymName() << (fallback.params.size() > 1 ? ", ..." : "")
                          << ") split along " << (fallback.params.size() == 1 ? "its" : "their")
                          << " input dimension of " << size << " would cut blocks of " << block
                          << " elements at tp " << *getMeshSize(module)
                          << ": held in bf16 instead (" << megabytes(fallback.heldBytes)
                          << " per rank instead of " << megabytes(fallback.storedBytes)
                          << "); tp sizes that keep them whole: "
                          << blockAlignedTpSizes(size, block);
    }
  }
};

} // namespace
