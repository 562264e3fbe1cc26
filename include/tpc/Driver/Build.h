// The build driver: turns a generated program's source into the per-rank binary, with the
// system C++ compiler (--target cpu) or nvcc (--target cuda), linked to this build's libtpcrt.
// Where those are was fixed when tpc was configured; nothing here depends on MLIR.
#ifndef TPC_DRIVER_BUILD_H
#define TPC_DRIVER_BUILD_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace tpc::driver {

/// Whether this tpc can build --target cuda programs (nvcc was found at configure time).
bool hasCudaCompiler();

/// The runtime libraries a binary for `target` links, as this tpc was configured: what,
/// beside the program's source, makes the binary (tpc run keys its cache on them).
std::vector<std::string> buildInputs(llvm::StringRef target);

/// What a failed build says: the problem, and optionally a note (an earlier binary removed).
struct BuildFailure {
  std::string error, note;
};

/// Compiles `source` for `target` ("cpu" or "cuda") into `binary`. The binary is linked under
/// a temporary name beside its own and renamed once complete, so a compiler or disk that
/// fails midway leaves no half-written binary that looks built; a failed build also removes
/// an earlier binary of that name, which was not built from this source. The compiler is
/// TPC_CXX, else `c++`, for the CPU target. Returns false and fills `failure` on error.
bool buildBinary(llvm::StringRef source, llvm::StringRef binary, llvm::StringRef target,
                 BuildFailure &failure);

} // namespace tpc::driver

#endif // TPC_DRIVER_BUILD_H
