// What a Device holds beside its buffers: the stream, cuBLASLt, NCCL, staging. Internal to
// runtime/cuda.
#ifndef TPCRT_CUDA_STATE_H
#define TPCRT_CUDA_STATE_H

#include "tpcrt/cuda/device.h"
#include "tpcrt/cuda/fused.h"

#include "paged.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>

namespace tpcrt::cuda {

class NcclCommunicator;

struct Device::State {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// The collective layer on the device: its memory (copies on the stream), the
  /// communicator (NCCL; local copies for a rank alone; Gloo through the host under
  /// TPC_CUDA_COMM=gloo) and the placement changes over them.
  std::unique_ptr<Memory> memory;
  std::unique_ptr<Communicator> communicator;
  NcclCommunicator *nccl = nullptr; // the communicator, when it is NCCL's: the watchdog's
  std::unique_ptr<Collectives> collectives;
  /// Between pipeline stages, over every rank (NCCL's or the host's), where there are
  /// several stages.
  std::unique_ptr<Communicator> pipeline;
  act *received = nullptr; // receiveLogits' rows, on the device
  size_t receivedCount = 0;
  int64_t *ids = nullptr, *positions = nullptr;
  std::vector<float> logits;
  /// Pinned staging for the logits coming back: a copy to pageable memory would block the
  /// host until the forward is done, so a lost peer would hang it before the watchdog runs.
  /// The copy into it follows a graph's launch, outside the capture: no graph holds it.
  act *hostLogits = nullptr;
  size_t hostLogitsCount = 0;
  /// A greedy step's argmax of each row, on the device and pinned on the host (grown with the
  /// logits' staging), and whether the last forward made them.
  int64_t *argmaxIds = nullptr, *hostArgmax = nullptr;
  size_t argmaxCount = 0;
  bool argmaxReady = false;
  /// --timeout, kept here: the Device outlives the group it joined (it is deleted after
  /// runModel returns, and finalizing NCCL is watched too).
  int timeoutSeconds = 30;
  /// Device copies of rotary inverse frequencies, by what the program passes: its host
  /// array (one per call site), or null with theta and head_dim for the default ones.
  std::map<std::pair<const double *, int64_t>, float *> invFreqs;
  /// Staging for collectives that move pieces of strided feature dims (DeviceMemory's), grown
  /// as needed (a decode graph holds it: growing it goes through releaseForRegrowth).
  act *scratch = nullptr;
  size_t scratchCount = 0;
  /// Attention scores, [rows * heads, keys], grown as needed: the prefill fallback's only, so
  /// never in a (one-token) decode graph.
  float *scores = nullptr;
  size_t scoresCapacity = 0;
  /// cuBLASLt plans by (m, n, k, bias, and the alignments of w, x, y and the bias).
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulHeuristicResult_t heuristic{};
    bool own = false; // cuBLASLt found no algorithm: gemmKernel (kernels.cu) runs instead
  };
  /// TPC_CUDA_GEMM=tpc: every GEMM through gemmKernel, for the GPU check's comparison of it.
  bool ownGemm = false;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, uint32_t, uint32_t, uint32_t, uint32_t>,
           Plan>
      plans;

  /// Decode steps as CUDA graphs, by forward function and by the step's count of sequences
  /// (each one row, sampled: the same launches for any of their lengths and blocks): run
  /// eagerly once (so lazy setup such as cuBLASLt plans happens outside the capture), then
  /// captured and replayed. Each keeps the collectives the communicator recorded during its
  /// capture, to trace them again on every replay. At most --max-num-seqs of them.
  struct Graph {
    int eagerRuns = 0;
    bool failed = false; // its capture failed: eager from then on (a rank without NCCL)
    cudaGraphExec_t exec = nullptr;
    const act *logits = nullptr;
    std::vector<TraceEntry> records;
  };
  std::map<std::pair<DeviceForwardFn, int64_t>, Graph> graphs;
  bool graphsAllowed = false;
  Graph *capturing = nullptr; // the graph being captured, if any

  /// The running forward's step as the attention kernels read it (paged.h): on the host
  /// (describeStep's), and uploaded by run() before the forward into the buffers below, which
  /// keep their addresses (a captured decode graph reads them) until a larger step grows them.
  StepOnHost stepHost;
  StepView stepView;
  /// The KV groups of the step's tables as this rank's caches hold them (allocateCaches).
  std::vector<GroupOnDevice> groups;
  /// Device arrays behind stepView, each with its capacity in elements.
  template <typename T> struct Array {
    T *data = nullptr;
    size_t capacity = 0;
  };
  Array<SequenceOnDevice> stepSequences;
  Array<int32_t> stepTables, stepRows, stepDecodes;
  /// A step that picks tokens: each row's Draw (its sequence's on its sampled row, greedy on
  /// the others), on the host and the device.
  std::vector<Draw> rowDraws;
  Array<Draw> stepDraws;

  // Attention's fixed decode scratch (attention.cu, sized by prepareAttention): split-KV
  // partials, the bounds they were sized for, and the SM count the split rule uses.
  float *attentionPartials = nullptr; ///< [heads, splits, headDim] unnormalized outputs
  float2 *attentionStats = nullptr;   ///< [heads, splits] (max in log2 units, sum of exps)
  int64_t attentionHeads = 0, attentionHeadDim = 0, attentionSplits = 0;
  int multiprocessors = 0;
  /// The most tokens a sequence holds: at most the most a forward computes
  /// (RankInfo::maxTokens, --max-model-len or --max-batch-tokens).
  int64_t longestSequence = 0;
};

/// The device's memory for the collective layer: copies and zeros on the stream, and the
/// collectives' staging buffer (State::scratch), grown as needed.
class DeviceMemory : public Memory {
public:
  explicit DeviceMemory(Device::State &state) : Memory(sizeof(act)), state(state) {}
  void copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch, int64_t count,
              int64_t rows) override;
  void zero(void *dst, int64_t count) override;
  void *scratch(size_t count) override;

private:
  Device::State &state;
};

/// Allocates the attention kernels' fixed scratch (attention.cu), once the caches exist.
void prepareAttention(Device::State &state, int64_t maxHeads, int64_t maxHeadDim);

/// Throws a DeviceError ("CUDA error in WHAT: reason") unless `e` is cudaSuccess.
void check(cudaError_t e, const char *what);
/// The check after each launch: a DeviceError naming the kernel `what` when one is pending.
void launched(const char *what);
/// Waits for the stream (`what` names the wait in errors): through NCCL's watchdog where the
/// communicator is NCCL's, so that a peer that stops answering makes the wait end after
/// --timeout instead of hanging the rank; plainly for a rank alone. Every host wait inside a
/// forward goes through this.
void waitForStream(Device::State &state, const char *what);
/// Before a buffer that a decode graph may hold is freed to grow: waits for the stream and
/// destroys the graphs (the next decode step captures again with the new address). Throws
/// while a capture is under way, whose eager run should have sized the buffer.
void releaseForRegrowth(Device::State &state, const char *what);

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_STATE_H
