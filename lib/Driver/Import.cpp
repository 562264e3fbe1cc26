// tpc import's driver (include/tpc/Driver/Import.h); the importer is lib/Import.
#include "tpc/Driver/Import.h"

#include "tpc/Driver/Run.h"
#include "tpc/Import/Importer.h"

#include "mlir/Parser/Parser.h"

namespace tpc::driver {

mlir::OwningOpRef<mlir::ModuleOp> importCheckpoint(Session &session, const std::string &path,
                                                   std::string &text) {
  std::optional<CheckpointConfig> config = readCheckpointConfig(path);
  if (!config)
    return nullptr;
  mlir::FailureOr<std::string> imported = import::importConfigText(
      config->name, config->text, &session.context(), &config->stored);
  if (mlir::failed(imported))
    return nullptr;
  text = std::move(*imported);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(
      text, mlir::ParserConfig(&session.context()), "imported");
  if (!module)
    reportError("internal error: the imported model does not verify (see above)");
  return module;
}

} // namespace tpc::driver
