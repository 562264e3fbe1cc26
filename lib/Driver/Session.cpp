// The shared MLIR session of the tpc commands (include/tpc/Driver/Session.h).
#include "tpc/Driver/Session.h"

#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;

namespace tpc {

namespace {
bool printOpOnDiagnostic = false;
} // namespace

void setPrintOpOnDiagnostic(bool print) { printOpOnDiagnostic = print; }

Session::Session(bool quiet) {
  DialectRegistry registry;
  registry.insert<tp::TPDialect, func::FuncDialect>();
  ctx.appendDialectRegistry(registry);
  ctx.loadAllAvailableDialects();
  // A user knows the model by its module names, which every tp diagnostic starts with; the op
  // in generic form is for whoever debugs tpc.
  ctx.printOpOnDiagnostic(printOpOnDiagnostic);
  printer = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &ctx, llvm::errs());
  // Registered last, so it sees each diagnostic first, counts it, and passes it on (a quiet
  // session keeps all but errors: handled here, they are not printed).
  counter = ctx.getDiagEngine().registerHandler([this, quiet](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      ++errorCount;
    else if (diag.getSeverity() == DiagnosticSeverity::Warning)
      ++warningCount;
    return success(quiet && diag.getSeverity() != DiagnosticSeverity::Error);
  });
}

Session::~Session() { ctx.getDiagEngine().eraseHandler(counter); }

OwningOpRef<ModuleOp> Session::loadModel(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    reportError("cannot read the model " + path + ": " + buffer.getError().message());
    ++errorCount;
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  ParserConfig config(&ctx);
  return parseSourceFile<ModuleOp>(sourceMgr, config);
}

OwningOpRef<ModuleOp> Session::loadModelText(StringRef name, StringRef text) {
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, name), llvm::SMLoc());
  ParserConfig config(&ctx);
  return parseSourceFile<ModuleOp>(sourceMgr, config);
}

OwningOpRef<ModuleOp> Session::runOnCopy(ModuleOp module,
                                         llvm::function_ref<void(OpPassManager &)> build) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(&ctx);
  build(pm);
  if (failed(pm.run(*copy)))
    return nullptr;
  return copy;
}

void reportError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "tpc") << message << "\n";
}

bool writeAtomically(const std::string &path, StringRef text) {
  // A unique name, so that two runs writing into one directory do not share a temporary.
  llvm::SmallString<256> temp;
  int fd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(path + ".partial-%%%%%%", fd, temp)) {
    reportError("cannot write " + path + ": " + ec.message());
    return false;
  }
  llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
  os << text;
  os.close();
  if (os.has_error()) {
    reportError("cannot write " + path + ": " + os.error().message());
    os.clear_error(); // else the stream's destructor aborts
    llvm::sys::fs::remove(temp);
    return false;
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, path)) {
    reportError("cannot write " + path + ": " + ec.message());
    llvm::sys::fs::remove(temp);
    return false;
  }
  return true;
}

} // namespace tpc
