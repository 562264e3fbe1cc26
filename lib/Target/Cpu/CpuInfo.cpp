// The CPU target: fp32 activations, C++ kernels and OpenBLAS, collectives over shared memory,
// Gloo or MPI; its binaries are built by the system C++ compiler against this build's
// libtpcrt (the CPU backend) and the runtime's layers. Where those are was fixed when tpc was
// configured (lib/Target/CMakeLists.txt).
#include "tpc/Target/TargetInfo.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using namespace mlir;
using namespace tpc;
using namespace tpc::target;

namespace {

class CpuTarget : public TargetInfo {
public:
  StringRef name() const override { return "cpu"; }
  StringRef summary() const override { return "C++, OpenBLAS, shared memory, Gloo or MPI"; }
  bool pipelinesStages() const override { return true; }

  tp::TargetAttr describe(MLIRContext *ctx) const override {
    // The runtime's kernels call BLAS and vectorized loops and keep each weight in its own
    // buffer: nothing to fuse or group. Every CPU transport gathers pieces of their own size.
    // Its runtime reduces a greedy step's logits to their argmax on the ranks.
    return tp::TargetAttr::get(ctx, name(), Float32Type::get(ctx), /*fuseElementwise=*/false,
                               /*fuseNorm=*/false, /*fuseRotary=*/false,
                               /*groupLinears=*/false, tp::GatherMode::variable,
                               /*greedyArgmax=*/true, /*arenaAlign=*/1);
  }
  std::unique_ptr<Spelling> spelling() const override { return makeCpuSpelling(); }

  StringRef sourceExtension() const override { return ".cpp"; }
  bool canBuild(std::string &) const override { return true; }
  std::vector<std::string> runtimeLibraries() const override {
    std::vector<std::string> libraries = {TPC_RUNTIME_LIBRARY};
    for (std::string &library : programLibraries())
      libraries.push_back(std::move(library));
    return libraries;
  }

  SmallVector<std::string> buildCommand(StringRef source, StringRef output,
                                        std::string &error) const override {
    const char *cxxEnv = std::getenv("TPC_CXX");
    llvm::ErrorOr<std::string> cxx =
        llvm::sys::findProgramByName(cxxEnv && *cxxEnv ? cxxEnv : "c++");
    if (!cxx) {
      error = "no C++ compiler found (c++, or TPC_CXX)";
      return {};
    }
    SmallVector<std::string> args = {*cxx, "-std=c++17", "-O2"};
    // A sanitizer build's runtime needs its programs built the same way.
    SmallVector<StringRef> sanitize;
    StringRef(TPC_SANITIZE_FLAGS).split(sanitize, ' ', -1, /*KeepEmpty=*/false);
    for (StringRef flag : sanitize)
      args.push_back(flag.str());
    // The CPU backend, the runtime's layers, and what they need.
    args.append({"-I" TPC_RUNTIME_INCLUDE_DIR, source.str()});
    for (std::string &library : runtimeLibraries())
      args.push_back(std::move(library));
    args.append({TPC_GLOO_LIBRARY, TPC_OPENBLAS_LIBRARY});
    for (StringRef library : systemLibraries())
      args.push_back(library.str());
    args.append({"-lpthread", "-o", output.str()});
    return args;
  }
};

} // namespace

const TargetInfo &tpc::target::cpuTarget() {
  static const CpuTarget target;
  return target;
}
