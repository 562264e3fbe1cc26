// The CPU backend's per-rank state, as the CPU program's forwards see it (tpcrt::Context,
// the name emitted code uses): the rank's fp32 weights, KV caches and arena, and the
// collectives on host buffers. The CPU backend (runtime/cpu/backend.cpp) owns it.
#ifndef TPCRT_CPU_CONTEXT_H
#define TPCRT_CPU_CONTEXT_H

#include "tpcrt/cpu/kernels.h"
#include "tpcrt/model.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt {
namespace cpu {
/// `bytes` for a buffer that decode steps stream whole, aligned to a cache line, zeroed where
/// `zeroed` says. On Linux it is mapped on its own and advised into transparent huge pages: a
/// step that reads every weight once walks far fewer TLB entries, and on a Zen 4 core the
/// one-row kernel read the same weights 1.3x faster (docs/weights.md, "Weights in huge
/// pages"). Throws bad_alloc when the system refuses; freeStreamed(nullptr, 0) does nothing.
std::byte *allocateStreamed(size_t bytes, bool zeroed = false);
void freeStreamed(std::byte *bytes, size_t size);

/// An allocateStreamed buffer that frees itself.
class StreamedBuffer {
public:
  StreamedBuffer() = default;
  explicit StreamedBuffer(size_t size, bool zeroed = false)
      : bytes_(allocateStreamed(size, zeroed)), size_(size) {}
  StreamedBuffer(StreamedBuffer &&other) noexcept
      : bytes_(std::exchange(other.bytes_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  StreamedBuffer &operator=(StreamedBuffer &&other) noexcept {
    std::swap(bytes_, other.bytes_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~StreamedBuffer() { freeStreamed(bytes_, size_); }
  std::byte *data() const { return bytes_; }
  size_t size() const { return size_; }

private:
  std::byte *bytes_ = nullptr;
  size_t size_ = 0;
};
} // namespace cpu

/// Every parameter's slice of this rank, each in its own type (fp32, or a matrix kept in the
/// checkpoint's bf16 or f16), one after the other in one allocation, each from a cache line:
/// a decode step streams them in about this order, and one stretch of memory streams faster
/// than the same bytes in many allocations (measured in bench/results/cpu-vs-transformers.txt).
/// A weight's rows start where whole vector loads do not straddle two lines (the CPU's
/// one-row matrix-vector product reads them so).
class HostWeights {
public:
  /// Room for `counts[i]` elements of `types[i]` for parameter i. Not zeroed: the loader
  /// writes every element of every weight, a short piece's padding included
  /// (Checkpoint::read, generateSlice), and a zero fill first would stream the whole slice
  /// through memory once more at load; the gaps to the next cache line are never read.
  void allocate(const std::vector<size_t> &counts, const std::vector<DType> &types) {
    offsets.clear();
    sizes = counts;
    dtypes = types;
    size_t total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      offsets.push_back(total);
      size_t width = dtypeBlockBytes(types[i]), blocks = counts[i] / size_t(dtypeBlockElements(types[i]));
      if (blocks > (SIZE_MAX - kLine) / width || total > SIZE_MAX - blocks * width - kLine)
        throw std::length_error("the weights' size overflows");
      total += (blocks * width + kLine - 1) / kLine * kLine;
    }
    storage = cpu::StreamedBuffer(total);
  }
  /// Weight i's fp32 elements: null where it is held in another type.
  float *data(size_t i) {
    return dtypes[i] == DType::F32 ? reinterpret_cast<float *>(storage.data() + offsets[i])
                                   : nullptr;
  }
  const float *data(size_t i) const { return const_cast<HostWeights *>(this)->data(i); }
  /// Weight i's bytes, whatever its type.
  void *raw(size_t i) { return storage.data() + offsets[i]; }
  const void *raw(size_t i) const { return storage.data() + offsets[i]; }
  DType type(size_t i) const { return dtypes[i]; }
  size_t size(size_t i) const { return sizes[i]; }

private:
  static constexpr size_t kLine = 64;
  cpu::StreamedBuffer storage; // in huge pages where the system gives them
  std::vector<size_t> offsets, sizes;
  std::vector<DType> dtypes;
};

/// One forward of the CPU program over `tokens` new tokens; returns this rank's [tokens,
/// vocab] logits (replicated; [1, vocab] when the model computes the last token only), valid
/// until the next call.
struct Context;
using ForwardFn = float *(*)(Context &, const int64_t *ids, const int64_t *positions,
                                   int64_t tokens);

struct Context {
  int rank = 0, tp = 1;
  Comm *comm = nullptr;
  HostWeights weights;
  std::vector<cpu::KVCache> caches;
  float *arena = nullptr;
  const Step *step = nullptr; // the forward under way's

  /// Weight i, held in fp32 (tp-weight-storage holds in fp32 every weight a kernel reads as
  /// floats; the lowering asks for matrix() where it did not).
  const float *weight(size_t i) const {
    if (weights.type(i) != DType::F32)
      fail("internal error: weight " + std::to_string(i) + " is held as " +
           dtypeName(weights.type(i)) + ", but read as f32");
    return weights.data(i);
  }
  /// Weight i as the linear and embedding kernels take it, in the type it is held in.
  cpu::Matrix matrix(size_t i) const { return {weights.raw(i), weights.type(i)}; }
  /// Stops this rank with an error (the others fail on their next collective).
  [[noreturn]] void fail(const std::string &message) const;

  /// Joins `comm`'s group: collectives go through its host communicator.
  void attach(Comm &comm, bool variableGathers);
  /// The placement changes the CPU program calls.
  Collectives &collectives() { return *placement; }
  /// Every stage's ranks, for the transfers between pipeline stages (where there are several).
  Communicator &pipeline() const {
    if (!stages)
      fail("internal error: a transfer between pipeline stages in a program of one stage");
    return *stages;
  }
  Communicator *stages = nullptr;
  /// A greedy step's argmax of each of `rows` rows of the logits split by vocabulary (`in`,
  /// this rank's pieces of `blocks`, as allGatherColumns takes them), without gathering
  /// them: every rank's largest logit of each row and its id are gathered, and `argmax`
  /// gets each row's largest (ties: the lowest id, as the argmax of a gathered row).
  void argmaxColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                     const char *module);
  /// The same of whole rows, [rows, cols], on this rank alone (the last pipeline stage's
  /// logits where no gather found it).
  void argmaxRows(const float *in, int64_t rows, int64_t cols);
  std::vector<int64_t> argmax; // the rows' ids, after argmaxColumns in this forward
  bool argmaxReady = false;    // whether this forward made them
  std::vector<float> sentIds;  // sendLogitsToStage's: the ids as sent
  /// TPC_FAULT=nan: the next gather of the logits (allGatherLogits) sends this rank's pieces
  /// with a NaN for its first logit of each row (poisonedLogits).
  bool poisonNextLogits = false;
  /// TPC_FAULT=perturb: the attention's softmax scale times this (Backend::perturbAttention).
  double attentionScaleFault = 1.0;
  /// A copy of `rows` rows of this rank's pieces of the logits `in` (of `blocks`, as
  /// allGatherColumns takes them), its first real logit of each row NaN; clears
  /// poisonNextLogits. Valid until the next call.
  const float *poisonedLogits(const float *in, int64_t rows, const std::vector<int64_t> &blocks);

private:
  HostMemory memory;
  std::unique_ptr<Collectives> placement;
  std::vector<float> poisoned; // poisonedLogits' copy
};

} // namespace tpcrt

#endif // TPCRT_CPU_CONTEXT_H
