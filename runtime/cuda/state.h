// What a Device holds beside its buffers: the stream, cuBLASLt, NCCL, staging. Internal to
// runtime/cuda.
#ifndef TPCRT_CUDA_STATE_H
#define TPCRT_CUDA_STATE_H

#include "tpcrt/cuda/device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <stdexcept>
#include <tuple>

namespace tpcrt::cuda {

struct Device::State {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  ncclComm_t nccl = nullptr;
  bool useNccl = false;
  bool noop = false; // TPC_SINGLE_RANK_VIEW: a rank alone, its collectives run nowhere
  int64_t *ids = nullptr, *positions = nullptr;
  std::vector<float> logits;
  /// Device copies of rotary inverse frequencies, by the host array the program passes.
  std::map<const double *, float *> invFreqs;
  /// Attention scores, [rows * heads, keys], grown as needed.
  float *scores = nullptr;
  size_t scoresCapacity = 0;
  /// cuBLASLt plans by (m, n, k, bias, and the alignments of w, x, y and the bias).
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulHeuristicResult_t heuristic{};
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, uint32_t, uint32_t, uint32_t, uint32_t>,
           Plan>
      plans;

  /// Waits for an NCCL call and the stream, aborting the communicator after the timeout.
  void waitNccl(ncclResult_t started, const char *what, int timeoutSeconds);
};

/// The state of the one Device of this process (kernels reach the stream through it).
extern Device::State *current;

void check(cudaError_t e, const char *what);

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_STATE_H
