// The build driver: turns a generated program's source into the per-rank binary with the
// command its target gives (lib/Target/{Cpu,Cuda}), linked to this build's runtime, and never
// leaves a half-written binary behind.
#ifndef TPC_DRIVER_BUILD_H
#define TPC_DRIVER_BUILD_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace tpc::target {
class TargetInfo;
} // namespace tpc::target

namespace tpc::driver {

/// What a failed build says: the problem, and optionally a note (an earlier binary removed).
struct BuildFailure {
  std::string error, note;
};

/// Compiles `source` for `target` into `binary`. The binary is linked under a temporary name
/// beside its own and renamed once complete, so a compiler or disk that fails midway leaves
/// no half-written binary that looks built; a failed build also removes an earlier binary of
/// that name, which was not built from this source. Returns false and fills `failure` on
/// error.
bool buildBinary(llvm::StringRef source, llvm::StringRef binary,
                 const target::TargetInfo &target, BuildFailure &failure);

} // namespace tpc::driver

#endif // TPC_DRIVER_BUILD_H
