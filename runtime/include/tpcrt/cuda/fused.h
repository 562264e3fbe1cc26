// Device helpers shared by libtpcrt_cuda's kernels and the kernels tpc generates for fused
// chains of elementwise and norm ops (--target cuda): bf16 in memory, fp32 arithmetic, one
// definition of each activation so a fused chain computes exactly what the separate kernels
// would, less the bf16 rounding between them.
#ifndef TPCRT_CUDA_FUSED_H
#define TPCRT_CUDA_FUSED_H

#include <cuda_bf16.h>

#include <cstdint>

namespace tpcrt::cuda::fused {

/// Threads per block of every row and elementwise kernel (a power of two: blockSum needs it).
constexpr int kThreads = 256;

/// Blocks of `threads` for `count` elements, one per thread.
inline unsigned blocksFor(int64_t count, int threads = kThreads) {
  return unsigned((count + threads - 1) / threads);
}

/// What generated kernels compute in: bf16 in memory, fp32 in registers.
using acc = float;

__device__ inline float load(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

__device__ inline float silu(float v) { return v / (1.0f + expf(-v)); }

__device__ inline float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

__device__ inline float geluTanh(float v) {
  return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__device__ inline float softcap(float v, float cap) { return cap * tanhf(v / cap); }
__device__ inline float cosine(float v) { return cosf(v); }
__device__ inline float sine(float v) { return sinf(v); }

/// The block's values combined by `op`; every thread gets the result. `partial` is kThreads
/// floats of shared memory, free again on return. Every thread of the block must call it.
template <typename Op> __device__ float blockReduce(float value, float *partial, Op op) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s)
      partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  float result = partial[0];
  __syncthreads();
  return result;
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ inline float blockSum(float value, float *partial) {
  return blockReduce(value, partial, Sum{});
}

} // namespace tpcrt::cuda::fused

#endif // TPCRT_CUDA_FUSED_H
