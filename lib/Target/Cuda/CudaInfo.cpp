// The CUDA target: bf16 activations on Hopper, generated kernels for every fusable chain,
// cuBLASLt GEMMs over grouped weights, NCCL collectives; its binaries are built by nvcc
// against this build's libtpcrt_cuda and the runtime's layers, when nvcc was found at
// configure time.
#include "tpc/Target/TargetInfo.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace tpc;
using namespace tpc::target;

namespace {

constexpr const char *kNoNvcc =
    "--target cuda: this tpc was built without nvcc (none was found at configure time); "
    "rebuild with CUDA installed in /usr/local/cuda, or pass --emit-only to write the source "
    "alone";

class CudaTarget : public TargetInfo {
public:
  StringRef name() const override { return "cuda"; }
  bool pipelinesStages() const override { return false; }
  StringRef summary() const override {
    return "CUDA C++ for Hopper, cuBLASLt, NCCL";
  }

  tp::TargetAttr describe(MLIRContext *ctx) const override {
    // Every launch costs on a GPU: each fusable chain becomes one kernel and linears of one
    // input one GEMM. NCCL has no gather of pieces of different sizes, so uneven ones are
    // padded to the largest. The device program gathers the logits whole on every step (the
    // argmax on the ranks is the CPU runtime's so far). Arena slots start at 16 bytes, the
    // alignment cuBLASLt's fastest kernels ask of their matrices.
    return tp::TargetAttr::get(ctx, name(), BFloat16Type::get(ctx), /*fuseElementwise=*/true,
                               /*fuseNorm=*/true, /*fuseRotary=*/true, /*groupLinears=*/true,
                               tp::GatherMode::padded, /*greedyArgmax=*/false,
                               /*arenaAlign=*/8);
  }
  std::unique_ptr<Spelling> spelling() const override { return makeCudaSpelling(); }

  StringRef sourceExtension() const override { return ".cu"; }

  bool canBuild(std::string &why) const override {
#ifdef TPC_NVCC
    return true;
#else
    why = kNoNvcc;
    return false;
#endif
  }

  std::vector<std::string> runtimeLibraries() const override {
#ifdef TPC_NVCC
    std::vector<std::string> libraries = {TPC_CUDA_RUNTIME_LIBRARY};
    for (std::string &library : programLibraries())
      libraries.push_back(std::move(library));
    return libraries;
#else
    return {};
#endif
  }

  SmallVector<std::string> buildCommand(StringRef source, StringRef output,
                                        std::string &error) const override {
#ifdef TPC_NVCC
    // sm_90a, not -arch=sm_90a: that shorthand can add a plain sm_90 pass, which rejects
    // Hopper-only instructions. Libraries go to the linker as they are (nvcc only knows
    // .a/.so by name): the CUDA backend, the runtime's layers, no CPU backend and no BLAS.
    SmallVector<std::string> args = {TPC_NVCC, "-std=c++17", "-O2",
                                     "-gencode=arch=compute_90a,code=sm_90a",
                                     "-I" TPC_RUNTIME_INCLUDE_DIR, source.str()};
    for (const std::string &library : runtimeLibraries())
      args.append({"-Xlinker", library});
    args.append({"-Xlinker", TPC_GLOO_LIBRARY});
    for (StringRef library : systemLibraries())
      args.append({"-Xlinker", library.str()});
    args.append({"-L" TPC_CUDA_LIB_DIR, "-lcublasLt", "-lnccl", "-lpthread", "-Xlinker",
                 "-rpath=" TPC_CUDA_LIB_DIR, "-o", output.str()});
    return args;
#else
    (void)source;
    (void)output;
    error = kNoNvcc;
    return {};
#endif
  }
};

} // namespace

const TargetInfo &tpc::target::cudaTarget() {
  static const CudaTarget target;
  return target;
}
