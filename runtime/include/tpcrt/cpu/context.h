// The CPU backend's per-rank state, as the CPU program's forwards see it (tpcrt::Context,
// the name emitted code uses): the rank's fp32 weights, KV caches and arena, and the
// collectives on host buffers. The CPU backend (runtime/cpu/backend.cpp) owns it.
#ifndef TPCRT_CPU_CONTEXT_H
#define TPCRT_CPU_CONTEXT_H

#include "tpcrt/cpu/kernels.h"
#include "tpcrt/model.h"

#include <memory>
#include <new>
#include <string>
#include <vector>

namespace tpcrt {

/// An allocator on cache-line boundaries: a weight's rows start where whole vector loads do
/// not straddle two lines (the CPU's one-row matrix-vector product reads them so).
template <typename T> struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <typename U> CacheLineAllocator(const CacheLineAllocator<U> &) {}
  T *allocate(size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T *p, size_t) { ::operator delete(p, kAlign); }
  bool operator==(const CacheLineAllocator &) const { return true; }
  bool operator!=(const CacheLineAllocator &) const { return false; }
};

/// Every parameter's slice of this rank, in fp32, one after the other in one allocation,
/// each from a cache line: a decode step streams them in about this order, and one stretch
/// of memory streams faster than the same bytes in many allocations (measured in
/// bench/results/cpu-vs-transformers.txt).
class HostWeights {
public:
  /// Room for `counts[i]` elements of parameter i, zeroed.
  void allocate(const std::vector<size_t> &counts) {
    offsets.clear();
    sizes = counts;
    size_t total = 0;
    for (size_t count : counts) {
      offsets.push_back(total);
      total += (count + kLineFloats - 1) / kLineFloats * kLineFloats;
    }
    storage.assign(total, 0.0f);
  }
  float *data(size_t i) { return storage.data() + offsets[i]; }
  const float *data(size_t i) const { return storage.data() + offsets[i]; }
  size_t size(size_t i) const { return sizes[i]; }

private:
  static constexpr size_t kLineFloats = 64 / sizeof(float);
  std::vector<float, CacheLineAllocator<float>> storage;
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
