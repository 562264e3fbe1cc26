// The GPU check's first step (scripts/gpu-check.sh, stage env), run before any binary: what
// the CUDA binaries need, one piece at a time, so that a failure says what is missing: the
// cuBLASLt and NCCL libraries the binaries link, loaded by the names the binaries ask for
// (TPC_PROBE_CUBLASLT, TPC_PROBE_NCCL, from the bundle step) and with their search path, with
// the file each resolved to and its version; the driver (new enough for the toolkit the bundle
// was built with); a Hopper device; one kernel run and its result read back.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -DTPC_PROBE_CUBLASLT='"libcublasLt.so.13"'
//        -DTPC_PROBE_NCCL='"libnccl.so.2"' gpu-probe.cu -ldl -o cuda-probe
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdio>
#include <string>

#ifndef TPC_PROBE_CUBLASLT
#define TPC_PROBE_CUBLASLT "libcublasLt.so"
#endif
#ifndef TPC_PROBE_NCCL
#define TPC_PROBE_NCCL "libnccl.so"
#endif

namespace {

__global__ void probeKernel(int *out) { *out = 42; }

bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  std::printf("probe: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return false;
}

/// Loads `name` as the binaries would; prints the file and the version `symbol` reports.
template <typename Version>
bool library(const char *name, const char *symbol, Version version) {
  void *handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    std::printf("probe: %s cannot be loaded: %s\n", name, dlerror());
    return false;
  }
  const char *file = "?";
  struct link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
    file = map->l_name;
  void *fn = dlsym(handle, symbol);
  if (!fn) {
    std::printf("probe: %s (%s) has no %s\n", name, file, symbol);
    return false;
  }
  std::printf("probe: %s => %s, version %s\n", name, file, version(fn).c_str());
  return true;
}

std::string cudaVersion(int v) { // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string libraryVersion(int v) { // cuBLASLt's 130100 -> "13.1.0", NCCL's 22703 -> "2.27.3"
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

} // namespace

int main() {
  // The libraries first: they load without a GPU, so this much is known on any machine.
  bool libraries =
      library(TPC_PROBE_CUBLASLT, "cublasLtGetVersion",
              [](void *fn) {
                return libraryVersion(int(reinterpret_cast<size_t (*)()>(fn)()));
              }) &
      library(TPC_PROBE_NCCL, "ncclGetVersion", [](void *fn) {
        int v = 0;
        reinterpret_cast<int (*)(int *)>(fn)(&v);
        return libraryVersion(v);
      });
  if (!libraries) {
    std::printf("probe: FAILED: a library the binaries link is missing\n");
    return 1;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("probe: CUDA driver supports %s; the binaries' runtime is %s\n",
              driver ? cudaVersion(driver).c_str() : "nothing (no driver loaded)",
              cudaVersion(runtime).c_str());
  if (driver == 0) {
    std::printf("probe: FAILED: no NVIDIA driver (libcuda.so.1) on this machine\n");
    return 1;
  }
  if (driver < runtime) {
    std::printf("probe: FAILED: the driver is older than the CUDA %s the bundle was built "
                "with\n", cudaVersion(runtime).c_str());
    return 1;
  }
  int count = 0;
  if (!ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount"))
    return 1;
  cudaDeviceProp prop{};
  if (count == 0 || !ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) {
    std::printf("probe: FAILED: no CUDA device visible\n");
    return 1;
  }
  std::printf("probe: %d device(s); device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB\n",
              count, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1 << 30));
  if (prop.major != 9) {
    std::printf("probe: FAILED: the binaries are built for sm_90a (Hopper) only\n");
    return 1;
  }
  int *value = nullptr, host = 0;
  if (!ok(cudaMalloc(&value, sizeof(int)), "cudaMalloc"))
    return 1;
  probeKernel<<<1, 1>>>(value);
  if (!ok(cudaGetLastError(), "launching a kernel") ||
      !ok(cudaMemcpy(&host, value, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy"))
    return 1;
  cudaFree(value);
  if (host != 42) {
    std::printf("probe: FAILED: a kernel ran but wrote %d, not 42\n", host);
    return 1;
  }
  std::printf("probe: one kernel ran and its result came back\n");
  std::printf("probe: ok\n");
  return 0;
}
