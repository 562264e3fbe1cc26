// Hugging Face config.json -> a model graph in the tp dialect (model.mlir text).
#ifndef TPC_IMPORT_IMPORTER_H
#define TPC_IMPORT_IMPORTER_H

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"

#include <map>
#include <string>
#include <vector>

namespace tpc::import {

/// How a checkpoint stores its tensors, by name, where not in f32: "bf16" or "f16".
using StoredTypes = std::map<std::string, std::string>;

/// The model.mlir text of the architecture config.json describes. Every field that changes
/// the math is either honoured or an error at its line in config.json (emitted through the
/// context's diagnostics); fields not known to matter are reported as warnings. `stored`:
/// the checkpoint's types, recorded on each parameter as `storage` (none: f32).
mlir::FailureOr<std::string> importConfig(llvm::StringRef configPath,
                                          mlir::MLIRContext *context,
                                          const StoredTypes *stored = nullptr);

/// importConfig of config.json text that did not come from a file of its own (a GGUF file's
/// metadata, as transformers reads it); `name` is what diagnostics call it.
mlir::FailureOr<std::string> importConfigText(llvm::StringRef name, std::string text,
                                              mlir::MLIRContext *context,
                                              const StoredTypes *stored = nullptr);

/// YaRN's get_mscale (transformers' modeling_rope_utils): 0.1 * mscale * ln(scale) + 1, or 1
/// for a scale of at most 1. DeepSeek-V2 also scales its softmax by get_mscale(factor,
/// mscale_all_dim)^2.
double yarnGetMscale(double scale, double mscale = 1.0);

/// The architectures importConfig knows, by model_type.
const std::vector<std::string> &supportedModelTypes();

} // namespace tpc::import

#endif // TPC_IMPORT_IMPORTER_H
