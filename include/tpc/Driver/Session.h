// What every tpc command shares: an MLIR context with the tp dialect, MLIR-style diagnostics
// (file:line:col: error: ...) on stderr with counts, and loading a model.mlir.
#ifndef TPC_DRIVER_SESSION_H
#define TPC_DRIVER_SESSION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SourceMgr.h"

namespace tpc {

class Session {
public:
  /// `quiet`: warnings and notes are counted but not printed (tpc run and serve without
  /// --verbose: the compiler's notes are tpc check's to show); errors always are.
  explicit Session(bool quiet = false);
  ~Session();

  /// Parses and verifies a tp model; errors are reported and give null.
  mlir::OwningOpRef<mlir::ModuleOp> loadModel(llvm::StringRef path);
  /// The same for a model's text (what tpc import writes), `name` naming it in diagnostics.
  mlir::OwningOpRef<mlir::ModuleOp> loadModelText(llvm::StringRef name, llvm::StringRef text);

  /// A copy of `module` after the passes `build` adds; null (errors reported) if they fail.
  mlir::OwningOpRef<mlir::ModuleOp>
  runOnCopy(mlir::ModuleOp module, llvm::function_ref<void(mlir::OpPassManager &)> build);

  mlir::MLIRContext &context() { return ctx; }
  unsigned errors() const { return errorCount; }
  unsigned warnings() const { return warningCount; }

private:
  mlir::MLIRContext ctx;
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<mlir::SourceMgrDiagnosticHandler> printer;
  mlir::DiagnosticEngine::HandlerID counter = 0;
  unsigned errorCount = 0, warningCount = 0;
};

/// Whether diagnostics at an op carry a note that prints the op in MLIR's generic form
/// (tpc --print-op-on-diagnostic): for debugging tpc, not for its users. Set before a
/// Session is made; off by default.
void setPrintOpOnDiagnostic(bool print);

/// Reports a usage or I/O problem that has no location ("tpc: error: ...").
void reportError(const llvm::Twine &message);

/// Writes `text` to `path` through a temporary file beside it, renamed into place once all of
/// it is written: a full disk or an unwritable directory is an error (reported) and leaves
/// neither a half-written file nor a temporary behind.
bool writeAtomically(const std::string &path, llvm::StringRef text);

} // namespace tpc

#endif // TPC_DRIVER_SESSION_H
