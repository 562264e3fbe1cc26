// tpc init-weights' driver (include/tpc/Driver/InitWeights.h): the model's parameters, by
// name and shape, handed to the runtime's seeded generator.
#include "tpc/Driver/InitWeights.h"

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Driver/Session.h"
#include "tpcrt/weights.h"

namespace tpc::driver {

std::optional<size_t> writeRandomWeights(const std::string &model, const std::string &output,
                                         uint64_t seed, bool bf16) {
  Session session;
  mlir::OwningOpRef<mlir::ModuleOp> module = session.loadModel(model);
  if (!module)
    return std::nullopt;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  for (tp::ParamOp param : module->getOps<tp::ParamOp>()) {
    llvm::ArrayRef<int64_t> shape = param.getTensorType().getShape();
    tensors.push_back({param.getSymName().str(), {shape.begin(), shape.end()}});
  }
  std::string error;
  if (!tpcrt::writeRandomCheckpoint(output, seed, tensors, bf16, error)) {
    reportError(error);
    return std::nullopt;
  }
  return tensors.size();
}

} // namespace tpc::driver
