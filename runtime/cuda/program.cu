// The CUDA program's side of the driver: the host forwards the driver calls run the
// generated device forwards through the one Device, made once the weights are loaded.
#include "tpcrt/cuda/program.h"

namespace tpcrt::cuda {

namespace {

/// What main() told the runtime about the device, and the Device itself. One program per
/// binary, so one of these.
struct Program {
  DeviceForwardFn forward = nullptr, sequenceParallel = nullptr;
  int64_t maxHeads = 0, maxHeadDim = 0;
  std::vector<std::vector<int>> weightGroups;
  Device *device = nullptr;
};

Program &program() {
  static Program p;
  return p;
}

void prepare(Context &cx, const ModelSpec &spec) {
  Program &p = program();
  p.device = new Device(cx, spec, p.maxHeads, p.maxHeadDim, p.weightGroups);
}

// The Device returns the logits in its own host buffer, which the driver only reads.
float *forwardOnDevice(Context &, const int64_t *ids, const int64_t *positions, int64_t n) {
  Program &p = program();
  return const_cast<float *>(p.device->run(ids, positions, n, p.forward));
}

float *sequenceParallelOnDevice(Context &, const int64_t *ids, const int64_t *positions,
                                int64_t n) {
  Program &p = program();
  return const_cast<float *>(p.device->run(ids, positions, n, p.sequenceParallel));
}

} // namespace

void addWeightGroup(ModelSpec *, std::vector<int> group) {
  program().weightGroups.push_back(std::move(group));
}

void setAttentionBounds(ModelSpec *, int64_t maxHeads, int64_t maxHeadDim) {
  program().maxHeads = maxHeads;
  program().maxHeadDim = maxHeadDim;
}

void setForwards(ModelSpec *spec, DeviceForwardFn forward, DeviceForwardFn sequenceParallel) {
  program().forward = forward;
  program().sequenceParallel = sequenceParallel;
  spec->forward = &forwardOnDevice;
  spec->forwardSequenceParallel = sequenceParallel ? &sequenceParallelOnDevice : nullptr;
  spec->prepare = &prepare;
}

int runModel(ModelSpec *spec, int argc, char **argv) {
  int code = tpcrt::runModel(*spec, argc, argv);
  // Every rank is done once runModel returns 0: NCCL is finalized together.
  if (code == 0) {
    delete program().device;
    program().device = nullptr;
  }
  return code;
}

} // namespace tpcrt::cuda
