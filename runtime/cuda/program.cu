// The CUDA program's side of the driver: what main() tells the runtime about the device, and
// the Device (the CUDA backend) the core's driver runs it on.
#include "tpcrt/cuda/program.h"

namespace tpcrt::cuda {

namespace {

/// What main() told the runtime about the device. One program per binary, so one of these.
struct Program {
  DeviceForwardFn forward = nullptr, sequenceParallel = nullptr;
  std::vector<DeviceForwardFn> stages; // where the program has pipeline stages
  int64_t maxHeads = 0, maxHeadDim = 0;
  std::vector<std::vector<int>> weightGroups;
};

Program &program() {
  static Program p;
  return p;
}

} // namespace

void addWeightGroup(ModelSpec *, std::vector<int> group) {
  program().weightGroups.push_back(std::move(group));
}

void setAttentionBounds(ModelSpec *, int64_t maxHeads, int64_t maxHeadDim) {
  program().maxHeads = maxHeads;
  program().maxHeadDim = maxHeadDim;
}

void setForwards(ModelSpec *, DeviceForwardFn forward, DeviceForwardFn sequenceParallel) {
  program().forward = forward;
  program().sequenceParallel = sequenceParallel;
}

void setStageForward(ModelSpec *, int64_t stage, DeviceForwardFn forward) {
  std::vector<DeviceForwardFn> &stages = program().stages;
  if (stages.size() <= size_t(stage))
    stages.resize(size_t(stage) + 1);
  stages[size_t(stage)] = forward;
}

int runModel(ModelSpec *spec, int argc, char **argv) {
  Program &p = program();
  auto *device = new Device(*spec, p.forward, p.sequenceParallel, p.maxHeads, p.maxHeadDim,
                            p.weightGroups);
  if (spec->stages > 1) {
    std::vector<DeviceForwardFn> stages = p.stages;
    stages.resize(size_t(spec->stages));
    stages[0] = p.forward;
    device->setStageForwards(std::move(stages));
  }
  int code = tpcrt::runModel(*spec, *device, argc, argv);
  // Every rank is done once runModel returns 0: NCCL is finalized together. A rank that
  // stopped leaves its Device as it is (finalizing would wait for the peers).
  if (code == 0)
    delete device;
  return code;
}

} // namespace tpcrt::cuda
