// What a program emitted by `tpc compile --target cuda` calls: the model's description
// (tpcrt/model.h), then the names of the CPU target's program (tpcrt/program.h) in
// tpcrt::cuda, on the rank's Device and bf16 device pointers, plus what only the device needs
// to know (weight groups, attention bounds). The generated kernels of fused units launch
// themselves on the Device's stream (tpcrt/cuda/fused.h).
#ifndef TPCRT_CUDA_PROGRAM_H
#define TPCRT_CUDA_PROGRAM_H

#include "tpcrt/cuda/device.h"
#include "tpcrt/cuda/fused.h"
#include "tpcrt/model.h"

#include <string>
#include <vector>

#include <stdexcept>

namespace tpcrt::cuda {

using ProgramContext = Device;
using ProgramAct = act;
/// The forwards, which run on the device: what setForwards takes. It, runModel (tpcrt's on a
/// Device, freed once every rank is done: NCCL finalizes together) and the device's own calls
/// of main() (addWeightGroup, setAttentionBounds) are declared from tpcrt/calls.def below.
using ProgramForward = DeviceForwardFn;
/// Every weight is held in the activation type on the device: a matrix is a pointer.
using ProgramMatrix = const act *;
/// The state the device's kernels take: the stream, cuBLASLt, their scratch.
inline Device::State &kernels(Device &device) { return *device.state; }
/// Layer `layer`'s KV cache: its KV group's blocks, which each sequence's tables name.
inline KVCache &kvCache(Device &device, int64_t layer) { return device.caches[size_t(layer)]; }

// What the device's kernels lack: attention sinks, value heads narrower or wider than the
// keys' and DeepSeek's rotary forms. The lowering refuses them for this target
// (CudaTarget.cpp), so these arrive as calls.def's defaults; anything else is a program not
// made for this runtime.
inline void attention(Device::State &state, const act *q, const act *k, const act *v,
                      int64_t rows, int64_t heads, int64_t kvHeads, int64_t headDim, double scale,
                      int64_t slidingWindow, double softcap, const HeadSplit &split,
                      KVCache &cache, act *out, const act *sinks, int64_t valueHeadDim,
                      const AttentionMask &mask) {
  if (sinks || valueHeadDim || mask.chunkSize || mask.temperatureFloor > 0)
    throw std::invalid_argument("the CUDA target runs no attention sinks, MLA value heads, "
                                "chunked attention or temperature tuning");
  attention(state, q, k, v, rows, heads, kvHeads, headDim, scale, slidingWindow, softcap, split,
            cache, out);
}
inline void rotary(Device::State &state, const act *x, int64_t rows, int64_t cols,
                   int64_t headDim, const double *invFreq, const int64_t *positions,
                   act *out, double scaling, bool interleaved, int64_t unrotated) {
  if (interleaved || unrotated)
    throw std::invalid_argument("the CUDA target runs no interleaved or partial rotary");
  rotary(state, x, rows, cols, headDim, invFreq, positions, out, scaling);
}

// The CPU-only calls of tpcrt/calls.def are not declared here; the CUDA-only ones of main()
// are, as the target's own.
#define TPC_CPU_CALL(result, name, args)
#define TPC_CUDA_SPEC_CALL TPC_TARGET_SPEC_CALL
#include "tpcrt/program_ops.inc"

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_PROGRAM_H
