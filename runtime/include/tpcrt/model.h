// What code emitted by `tpc compile` sees of libtpcrt: the model's description, the
// per-rank context its forward runs in, and the driver that loads weights and generates.
#ifndef TPCRT_MODEL_H
#define TPCRT_MODEL_H

#include "tpcrt/comm.h"
#include "tpcrt/failure.h"
#include "tpcrt/kernels.h"
#include "tpcrt/weights.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
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
  /// Gives the memory back (a backend that copied the weights elsewhere).
  void release() { std::vector<float, CacheLineAllocator<float>>().swap(storage); }

private:
  static constexpr size_t kLineFloats = 64 / sizeof(float);
  std::vector<float, CacheLineAllocator<float>> storage;
  std::vector<size_t> offsets, sizes;
};

struct ParamDesc {
  const char *name;
  std::vector<int64_t> hfShape; // as in the checkpoint
  SliceSpec slice;              // piece left 0: the driver sets rank * chunks / tp
  std::vector<std::string> sources; // checkpoint tensors it stacks, when saved in pieces
};

struct Context;
/// One forward over `tokens` new tokens; returns this rank's [tokens, vocab] logits
/// (replicated; [1, vocab] when the model computes the last token only), valid until the
/// next call.
using ForwardFn = float *(*)(Context &, const int64_t *ids, const int64_t *positions,
                                   int64_t tokens);

struct ModelSpec {
  const char *name;
  int64_t tp;
  int64_t vocab;
  int64_t floatsPerToken;            // the activation arena, per token
  std::vector<ParamDesc> params;
  std::vector<int64_t> kvWidths;     // per attention layer: kv heads * head_dim, local
  std::vector<int64_t> kvValueWidths; // the same for values (kv heads * value head dim)
  ForwardFn forward;                 // every token count
  ForwardFn forwardSequenceParallel; // token counts tp divides (null: none)
  bool lastTokenOnly = false;        // forwards return the last token's row only
  std::vector<int64_t> eosIds;       // generation stops at these (config.json's eos_token_id)
  /// Called once the weights are loaded, before the first forward (the CUDA target moves
  /// them to the device here); null for the CPU target.
  void (*prepare)(Context &, const ModelSpec &) = nullptr;
  /// config.json's max_position_embeddings (the module's tp.max_position_embeddings), which
  /// bounds --max-seq-len; 0 where unknown. Last, so that specs written without it still
  /// initialize every other field.
  int64_t maxPositions = 0;
};

/// --max-seq-len when none is given: 2048 tokens, or the model's max_position_embeddings
/// where that is fewer (`maxPositions` 0: unknown). `tpc analyze` reports with it too.
inline constexpr int64_t kDefaultMaxSeqLen = 2048;
inline int64_t defaultMaxSeqLen(int64_t maxPositions) {
  return maxPositions > 0 ? std::min(kDefaultMaxSeqLen, maxPositions) : kDefaultMaxSeqLen;
}
/// The context a run holds: `requested` (--max-seq-len) or the default. Empty, with `error`
/// naming both numbers, when the request is longer than the model's positions.
std::optional<int64_t> chooseMaxSeqLen(std::optional<int64_t> requested, int64_t maxPositions,
                                       std::string &error);

/// What the driver asks of a backend that keeps state of its own (the CUDA Device) besides
/// its forwards; the CPU target has none, its state is the Context's.
class DeviceHooks {
public:
  virtual ~DeviceHooks() = default;
  /// Empties the backend's KV caches (Context::resetCaches: after --warmup's forwards).
  virtual void resetCaches() = 0;
  /// Makes the device fault on purpose (TPC_FAULT=device), so that the forward under way
  /// fails with a device error: how the tests see such an error reported.
  virtual void injectFault() = 0;
};

struct Context {
  int rank = 0, tp = 1;
  int localRank = 0;     // LOCAL_RANK: which GPU a CUDA rank takes
  int64_t maxTokens = 0; // --max-seq-len: what the arena and KV caches hold
  int timeoutSeconds = 30; // --timeout: how long a collective may wait for a peer
  /// --random-weights for a target that generates them itself (spec.prepare): the weights
  /// stay empty here, and each parameter's slice of this rank is in `slices`.
  std::optional<uint64_t> randomSeed;
  std::vector<SliceSpec> slices;
  Comm *comm = nullptr;
  HostWeights weights;
  std::vector<KVCache> caches;
  float *arena = nullptr;
  uint64_t arenaBytes = 0; // what the arena's allocation asked for (the CUDA Device's, there)
  std::vector<TraceEntry> trace; // the collectives run, as each communicator recorded them
  DeviceHooks *device = nullptr; // set by a backend with state of its own

  /// Every KV cache empty again, the backend's too: the next forward starts a new sequence.
  void resetCaches();

  const float *weight(size_t i) const { return weights.data(i); }
  /// Stops this rank with an error (the others fail on their next collective).
  [[noreturn]] void fail(const std::string &message) const;

  /// Joins `comm`'s group: collectives go through its host communicator, recorded in
  /// `trace`.
  void attach(Comm &comm);
  /// The placement changes the CPU program calls (the CUDA Device has its own, on the GPU).
  Collectives &collectives() { return *placement; }

private:
  HostMemory memory;
  std::unique_ptr<Collectives> placement;
};

/// The emitted binary's main: arguments, rank identity, weights, prefill and greedy decode.
int runModel(const ModelSpec &spec, int argc, char **argv);

} // namespace tpcrt

#endif // TPCRT_MODEL_H
