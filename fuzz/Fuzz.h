// What the libFuzzer targets share: the input as a file (tpc's readers take paths, as the CLI
// does), and an MLIR context with the tp dialect whose diagnostics go nowhere, since errors
// are the expected outcome for most inputs. A crash, a sanitizer report, or a broken oracle
// (__builtin_trap) is what a fuzzer finds.
#ifndef TPC_FUZZ_FUZZ_H
#define TPC_FUZZ_FUZZ_H

#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>

namespace tpc::fuzz {

/// Writes `data` to a file of this process (in /dev/shm when there is one) and returns its
/// path; the same path each call, so a run leaves one file behind at most.
inline std::string writeInput(const uint8_t *data, size_t size, const char *suffix) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string path =
      dir + "/tpc-fuzz-" + std::to_string(getpid()) + "-" + suffix;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    __builtin_trap(); // the harness itself is broken
  if (size)
    std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

/// A context with the dialects tpc parses, diagnostics swallowed.
inline mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registry.insert<tp::TPDialect, mlir::func::FuncDialect>();
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) {});
    c->printOpOnDiagnostic(false);
    c->printStackTraceOnDiagnostic(false);
    return c;
  }();
  return *ctx;
}

} // namespace tpc::fuzz

#endif // TPC_FUZZ_FUZZ_H
