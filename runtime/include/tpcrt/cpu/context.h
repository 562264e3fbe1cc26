// The CPU backend's per-rank state, as the CPU program's forwards see it (tpcrt::Context,
// the name emitted code uses): the rank's fp32 weights, KV caches and arena, and the
// collectives on host buffers. The CPU backend (runtime/cpu/backend.cpp) owns it.
#ifndef TPCRT_CPU_CONTEXT_H
#define TPCRT_CPU_CONTEXT_H

#include "tpcrt/cpu/kernels.h"
#include "tpcrt/model.h"

#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpcrt {

/// Every parameter's slice of this rank, in fp32, one after the other in one allocation,
/// each from a cache line: a decode step streams them in about this order, and one stretch
/// of memory streams faster than the same bytes in many allocations (measured in
/// bench/results/cpu-vs-transformers.txt). A weight's rows start where whole vector loads do
/// not straddle two lines (the CPU's one-row matrix-vector product reads them so).
class HostWeights {
public:
  /// Room for `counts[i]` elements of parameter i. Not zeroed: the loader writes every
  /// element of every weight, a short piece's padding included (Checkpoint::read,
  /// generateSlice), and a zero fill first would stream the whole slice through memory once
  /// more at load; the gaps to the next cache line are never read.
  void allocate(const std::vector<size_t> &counts) {
    offsets.clear();
    sizes = counts;
    size_t total = 0;
    for (size_t count : counts) {
      offsets.push_back(total);
      if (count > kMaxFloats - kLineFloats || total > kMaxFloats - count - kLineFloats)
        throw std::length_error("the weights' size overflows");
      total += (count + kLineFloats - 1) / kLineFloats * kLineFloats;
    }
    storage.reset(static_cast<float *>(::operator new(total * sizeof(float), kAlign)));
  }
  float *data(size_t i) { return storage.get() + offsets[i]; }
  const float *data(size_t i) const { return storage.get() + offsets[i]; }
  size_t size(size_t i) const { return sizes[i]; }

private:
  static constexpr std::align_val_t kAlign{64};
  static constexpr size_t kLineFloats = 64 / sizeof(float);
  static constexpr size_t kMaxFloats = SIZE_MAX / sizeof(float);
  struct Free {
    void operator()(float *p) const { ::operator delete(p, kAlign); }
  };
  std::unique_ptr<float[], Free> storage;
  std::vector<size_t> offsets, sizes;
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

  const float *weight(size_t i) const { return weights.data(i); }
  /// Stops this rank with an error (the others fail on their next collective).
  [[noreturn]] void fail(const std::string &message) const;

  /// Joins `comm`'s group: collectives go through its host communicator.
  void attach(Comm &comm, bool variableGathers);
  /// The placement changes the CPU program calls.
  Collectives &collectives() { return *placement; }

private:
  HostMemory memory;
  std::unique_ptr<Collectives> placement;
};

} // namespace tpcrt

#endif // TPCRT_CPU_CONTEXT_H
