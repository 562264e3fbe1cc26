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

namespace tpcrt::cuda {

/// The parameters (by index) the device lays one after the other, so that linears reading
/// one input run as one GEMM for one row.
void addWeightGroup(ModelSpec *spec, std::vector<int> group);
/// The most local query heads and the largest head size of any attention layer.
void setAttentionBounds(ModelSpec *spec, int64_t maxHeads, int64_t maxHeadDim);
/// The forwards, which run on the device (null `sequenceParallel`: none).
void setForwards(ModelSpec *spec, DeviceForwardFn forward, DeviceForwardFn sequenceParallel);
/// tpcrt::runModel on a Device, freed once every rank is done (NCCL finalizes together).
int runModel(ModelSpec *spec, int argc, char **argv);

using ProgramContext = Device;
using ProgramAct = act;
/// The state the device's kernels take: the stream, cuBLASLt, their scratch.
inline Device::State &kernels(Device &device) { return *device.state; }
#include "tpcrt/program_ops.inc"

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_PROGRAM_H
