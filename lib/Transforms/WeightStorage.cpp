// tp-weight-storage: the type the binary holds each weight in. Decode streams every weight
// once per token, so bytes per weight are the speed; the CPU target keeps the checkpoint's
// bf16 and f16 matrices as they are (its linear and embedding kernels widen them in
// registers) and holds what other kernels read as fp32, the GPU target holds everything in
// its activation type. The decision is written on each tp.param, where the loader, the
// lowering and `tpc analyze` read it.
#include "tpc/Transforms/Passes.h"

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

struct TPWeightStoragePass : tpc::tp::impl::TPWeightStorageBase<TPWeightStoragePass> {
  using TPWeightStorageBase::TPWeightStorageBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<WeightType> asked;
    std::string name = weights;
    if (name != "stored") {
      asked = symbolizeWeightType(name == "fp32" ? "f32" : name == "fp16" ? "f16" : name);
      if (!asked) {
        module.emitError() << "--weights-dtype " << weights
                           << " is not a weight type: stored, f32, bf16 or f16";
        return signalPassFailure();
      }
    }
    FailureOr<TargetAttr> target = requireTarget(module, getArgument());
    if (failed(target))
      return signalPassFailure();
    std::optional<WeightType> activation = weightTypeOf((*target).getActivation());
    for (ParamOp param : module.getOps<ParamOp>()) {
      WeightType held = WeightType::f32;
      if (activation != WeightType::f32)
        held = activation.value_or(WeightType::f32);
      else if (readAsMatrix(param))
        held = asked.value_or(param.getWeightType());
      std::optional<WeightType> element = weightTypeOf(param.getTensorType().getElementType());
      if (element == held)
        param.removeStorageAttr();
      else
        param.setStorage(held);
    }
  }
};

} // namespace
