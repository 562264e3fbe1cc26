// Hugging Face config.json -> a model graph in the tp dialect (model.mlir text).
#ifndef TPC_IMPORT_IMPORTER_H
#define TPC_IMPORT_IMPORTER_H

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace tpc::import {

/// The model.mlir text of the architecture config.json describes. Every field that changes
/// the math is either honoured or an error at its line in config.json (emitted through the
/// context's diagnostics); fields not known to matter are reported as warnings.
mlir::FailureOr<std::string> importConfig(llvm::StringRef configPath,
                                          mlir::MLIRContext *context);

/// The architectures importConfig knows, by model_type.
const std::vector<std::string> &supportedModelTypes();

} // namespace tpc::import

#endif // TPC_IMPORT_IMPORTER_H
