// libtpcrt's CUDA backend (--target cuda): bf16 weights and activations with fp32
// accumulation, GEMMs through cuBLASLt, collectives through NCCL (or Gloo on host buffers).
// The Device is a Backend (tpcrt/backend.h) like the CPU's: the core's driver loads the
// checkpoint into its device weights tensor by tensor and asks it for forwards, which run
// the same op calls as the CPU program, on device pointers.
#ifndef TPCRT_CUDA_DEVICE_H
#define TPCRT_CUDA_DEVICE_H

#include "tpcrt/backend.h"
#include "tpcrt/model.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tpcrt::cuda {

using act = __nv_bfloat16;

/// One layer's keys and values on the device, [rows, width] each: the blocks of its KV group's
/// pool (tpcrt/batch.h, tpcrt/kv_groups.h), rows = blocks * block size. What each sequence
/// holds is the step's business: its block tables and cached count, which the kernels read on
/// the device.
struct KVCache {
  act *keys = nullptr, *values = nullptr;
  int64_t rows = 0, width = 0, group = 0;
};

class Device;
using DeviceForwardFn = act *(*)(Device &, const int64_t *ids, const int64_t *positions,
                                       int64_t tokens);

class Device final : public Backend {
public:
  /// A Device for `spec`'s forwards (`forward`, and `sequenceParallel` or null), made before
  /// the rank joins (attach). `maxHeads` and `maxHeadDim` bound every attention layer's local
  /// query heads and head size (the decode attention's scratch is sized by them). The
  /// parameters of each of `weightGroups` (by index) lie one after the other in one
  /// allocation, in that order.
  Device(const ModelSpec &spec, DeviceForwardFn forward, DeviceForwardFn sequenceParallel,
         int64_t maxHeads, int64_t maxHeadDim, std::vector<std::vector<int>> weightGroups);
  /// Finalizes NCCL (aborting it if a peer does not answer within --timeout) and frees the
  /// device; the program deletes its Device once every rank is done.
  ~Device() override;

  // The Backend. Errors throw, naming the CUDA, cuBLASLt or NCCL call.
  /// Picks the GPU (LOCAL_RANK modulo the visible devices), makes the stream and cuBLASLt.
  void attach(const RankInfo &rank) override;
  /// bf16 weights, fp32 values converted as they are written.
  DType weightType(const WeightDesc &) const override { return DType::BF16; }
  void allocateWeights(const std::vector<WeightDesc> &weights) override;
  float *hostWeight(size_t) override { return nullptr; }
  void writeWeight(size_t i, int64_t offset, const float *values, int64_t count) override;
  /// Generated on the device, where they will live.
  bool generateWeight(size_t i, uint64_t seed, const ParamDesc &param,
                      const SliceSpec &slice) override;
  DType kvCacheType() const override { return DType::BF16; } // act
  /// Paged caches, each layer's of its KV group's blocks of blockSize tokens.
  uint64_t allocateCaches(const std::vector<KVCacheDesc> &layers, int64_t blockSize) override;
  uint64_t allocateArena(int64_t perToken, int64_t tokens) override;
  /// Connects the communicator: NCCL, its unique id sent through the group's broadcast,
  /// unless TPC_CUDA_COMM=gloo (host collectives, so several ranks may share one GPU).
  void start() override;
  /// Steps of any number of sequences over the paged cache (decode and chunked prefill, each
  /// sequence's keys through its block table of the layer's KV group); each row's token
  /// picked on the device, its argmax or its draw (pickRows); every weight held in bf16, no
  /// block type.
  BackendCapabilities capabilities() const override {
    BackendCapabilities can;
    can.argmax = true;
    can.draws = true;
    return can;
  }
  bool hasSequenceParallel() const override { return sequenceParallelFn != nullptr; }
  /// A step of any sequences: described for the kernels (its tables checked against the
  /// groups' pools), then run().
  const float *forward(const Step &step, bool sequenceParallel) override;
  /// After a forward of a step with `argmax`: each row's token, picked on the device from the
  /// gathered logits (its argmax, or its sequence's draw), only the ids copied back.
  const int64_t *argmax() const override;
  /// Through the pipeline's communicator into device memory, then to the host as fp32. The
  /// device does not hold its transfers (capabilities().pipelined is false): a step goes
  /// through the stages alone.
  const float *receiveLogits(int64_t rows, int64_t cols, int64_t stage,
                             const char *module) override;
  /// Launches a kernel that writes through a null pointer (TPC_FAULT=device).
  bool injectFault() override;
  /// Also drops the decode graphs (a --warmup's), which hold the attention's scale as captured.
  void perturbAttention() override;

  /// One forward: ids, positions and the step's description to the device, `fn`, the logits
  /// back as fp32 (on a step with `argmax`, each row's argmax instead, and null returned). A
  /// one-token forward is captured in a CUDA graph the second time it runs and replayed
  /// from then on, unless collectives go through the host (TPC_CUDA_COMM=gloo) or
  /// TPC_CUDA_GRAPHS=0. The host waits once per forward, polling NCCL's asynchronous error
  /// meanwhile: the watchdog.
  const float *run(const int64_t *ids, const int64_t *positions, int64_t tokens,
                   DeviceForwardFn fn);

  /// The stream every kernel runs on (generated kernels launch on it too).
  cudaStream_t stream() const;
  /// Throws a DeviceError if the kernel just launched could not start (or an earlier one
  /// faulted).
  void launched(const char *what) const;

  const act *weight(size_t i) const { return weights[i]; }
  /// Stops this rank with an error (the others fail on their next collective).
  [[noreturn]] void fail(const std::string &message) const;

  int rank = 0, tp = 1;
  act *arena = nullptr;
  /// TPC_FAULT=perturb: the attention's softmax scale times this (Backend::perturbAttention).
  double attentionScaleFault = 1.0;
  std::vector<KVCache> caches;
  int64_t cacheBlockSize = 1; // as allocateCaches was given
  const Step *step = nullptr; // the forward under way's

  /// The placement changes the program calls, on device buffers (tpcrt/collectives.h).
  Collectives &collectives();
  /// Every stage's ranks, for the transfers between pipeline stages (where there are
  /// several): NCCL's send and receive, or Gloo's through the host.
  Communicator &pipeline();
  /// Each pipeline stage's forward (the first is the constructor's), before attach picks
  /// this rank's.
  void setStageForwards(std::vector<DeviceForwardFn> forwards) { stageForwards = std::move(forwards); }

  struct State; // CUDA handles, NCCL, scratch: device.cu's business
  std::unique_ptr<State> state;

private:
  /// Waits for the stream: through NCCL's watchdog when the communicator is NCCL's (a peer
  /// that stops answering makes it abort after --timeout), plainly for a rank alone.
  void wait(const char *what);
  /// Room for `count` logits on the pinned host staging.
  void growHostLogits(size_t count);

  const ModelSpec &spec;
  DeviceForwardFn forwardFn, sequenceParallelFn;
  std::vector<DeviceForwardFn> stageForwards;
  int64_t maxHeads, maxHeadDim;
  std::vector<std::vector<int>> weightGroups;
  RankInfo info;                  // the rank, as the driver joined it
  int visibleDevices = 0;
  std::vector<act *> weights;     // by parameter index
  std::vector<int64_t> weightElements; // by parameter index
  std::vector<act *> allocations; // what holds them
};

// Kernels. Each takes first the state of the Device it runs for, and launches on its stream
// with its cuBLASLt handle, plans and scratch. Other arguments as in tpcrt/cpu/kernels.h, on
// device pointers; ids and positions are device arrays (ids were checked against the
// vocabulary on the host).
bool embedding(Device::State &state, const int64_t *ids, int64_t tokens, const act *table,
               int64_t rowOffset, int64_t rows, int64_t vocab, int64_t width, act *out);
/// Each row's sum of squares ([rows, 1], fp32; zeros when not `contribute`), and the row
/// norm of a row split by features given those sums over `features` columns
/// (tpcrt::sumSquares).
void sumSquares(Device::State &state, const act *x, int64_t rows, int64_t cols, bool contribute,
                float *out);
void rmsNormOfTotals(Device::State &state, const act *x, int64_t rows, int64_t cols,
                     const float *totals, int64_t features, const act *weight, double epsilon,
                     double weightOffset, act *out);
void rmsNorm(Device::State &state, const act *x, int64_t rows, int64_t cols, const act *weight,
             double epsilon, double weightOffset, act *out);
/// Each of `rows` rows' argmax of [rows, vocab] logits into `out` (device int64s): the
/// largest, the lowest id among equals.
void rowArgmax(Device::State &state, const act *logits, int64_t rows, int64_t vocab,
               int64_t *out);
/// Each of `rows` rows' token of [rows, vocab] logits into `out` (device int64s), picked by
/// that row's Draw of `draws` (device memory) as the host's Sampler picks (draw.h).
void pickRows(Device::State &state, const act *logits, int64_t rows, int64_t vocab,
              const Draw *draws, int64_t *out);
void linear(Device::State &state, const act *x, int64_t rows, int64_t in, const act *w, int64_t out,
            const act *bias, act *y);
void rotary(Device::State &state, const act *x, int64_t rows, int64_t cols, int64_t headDim,
            const double *invFreq, const int64_t *positions, act *out, double scaling = 1.0);
void attention(Device::State &state, const act *q, const act *k, const act *v, int64_t rows,
               int64_t heads, int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               double softcap, const HeadSplit &split, KVCache &cache, act *out);
void silu(Device::State &state, const act *x, int64_t n, act *out);
void gelu(Device::State &state, const act *x, int64_t n, bool tanhApproximation, act *out);
void scale(Device::State &state, const act *x, int64_t n, double factor, act *out);
void softcap(Device::State &state, const act *x, int64_t n, double cap, act *out);
void add(Device::State &state, const act *a, const act *b, int64_t n, act *out);
void mul(Device::State &state, const act *a, const act *b, int64_t n, act *out);
void sliceColumns(Device::State &state, const act *x, int64_t rows, int64_t cols, int64_t offset,
                  int64_t size, act *out);
/// rows x cols elements from src (row stride srcStride) to dst (row stride dstStride).
void copyRows(Device::State &state, act *dst, int64_t dstStride, const act *src, int64_t srcStride,
              int64_t rows, int64_t cols);

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_DEVICE_H
