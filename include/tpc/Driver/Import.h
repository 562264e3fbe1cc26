// tpc import: a checkpoint's config (config.json, or a GGUF file's metadata) into a model
// graph, typed as the checkpoint beside it stores its tensors, and verified before anyone
// sees it, since what import writes is what every later command parses.
#ifndef TPC_DRIVER_IMPORT_H
#define TPC_DRIVER_IMPORT_H

#include "tpc/Driver/Session.h"

#include <string>

namespace tpc::driver {

/// The model imported from the config at `path` (as Run.h's readCheckpointConfig finds it),
/// parsed in `session`, its text in `text`; null, with the errors reported, when the config
/// cannot be read or imported or the model does not verify.
mlir::OwningOpRef<mlir::ModuleOp> importCheckpoint(Session &session, const std::string &path,
                                                   std::string &text);

} // namespace tpc::driver

#endif // TPC_DRIVER_IMPORT_H
