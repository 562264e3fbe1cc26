// The line between libtpcrt's core and a backend. The core (runtime/core) reads the request,
// connects the group, loads the weights and drives the generation; a backend (runtime/cpu,
// runtime/cuda) owns every buffer a forward touches and runs the forwards. The core describes
// what to allocate (each weight by storage type and shape, each layer's KV cache, the arena),
// loads the checkpoint into the backend's weights one tensor at a time, and asks for
// forwards, cache resets and injected faults; it holds no buffer of a backend's. Plain C++17.
#ifndef TPCRT_BACKEND_H
#define TPCRT_BACKEND_H

#include "tpcrt/batch.h"
#include "tpcrt/dtype.h"
#include "tpcrt/kv_groups.h"
#include "tpcrt/model.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcrt {

/// One weight as a backend holds it: this rank's slice of parameter `param` (its index in
/// ModelSpec::params), of the local `shape` (padding included), stored as `dtype`.
struct WeightDesc {
  size_t param = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  uint64_t bytes() const { return dtypeBytesFor(dtype, elements()); }
};

/// One attention layer's KV cache: the keys' and the values' elements per token (local), and
/// its blocks, those of KV group `group` (tpcrt/kv_groups.h), whose queries read `reach`.
struct KVCacheDesc {
  int64_t keyWidth = 0, valueWidth = 0;
  int64_t blocks = 0, group = 0;
  KvReach reach;
};

/// The rank a backend runs, as the core connected it.
struct RankInfo {
  int rank = 0, tp = 1;    // in this rank's tp group (its pipeline stage's)
  int stage = 0, stages = 1; // the pipeline stage it runs, of how many
  Comm *world = nullptr;   // every stage's ranks, where there are several stages (else comm):
                           // the step descriptor and the transfers between stages
  int worldRank() const { return stage * tp + rank; }
  int worldSize() const { return stages * tp; }
  Comm *everyone() const { return world ? world : comm; }
  int localRank = 0;       // LOCAL_RANK: which device the rank takes
  int64_t maxTokens = 0;   // the most tokens one forward computes (what the arena holds)
  int timeoutSeconds = 30; // --timeout: how long a collective may wait for a peer
  Comm *comm = nullptr;    // the group: host collectives (already traced), broadcast, why a
                           // rank stopped
  std::vector<TraceEntry> *trace = nullptr; // where a backend's own collectives are recorded
  bool variableGathers = false; // the program's gather mode (ModelSpec::variableGathers)
};

/// What a backend can run, which the engine and the driver ask before they plan a run, rather
/// than meet a refusal in the middle of one.
struct BackendCapabilities {
  /// Whether a step with Step::argmax gets each sampled row's argmax (Backend::argmax)
  /// instead of its logits; the engine asks for it only then.
  bool argmax = false;
  /// With `argmax`: whether it also picks a sampled row's token by its sequence's Draw
  /// (temperature, top_k, top_p, min_p and rank 0's uniform number), as the host's Sampler
  /// would. The engine hands it only rows that nothing else changes (no penalty, logit_bias,
  /// min_tokens holding a stop id back, grammar, logprobs or dumped logits); a step with any
  /// other row comes back as logits and is sampled on rank 0.
  bool draws = false;
  /// The block types it holds weights in as a file stores them (Backend::hostBlocks), and
  /// those it makes from fp32 values (--quantize's, through writeWeight). The driver refuses
  /// a weight held in a block type it can be given in neither way before it allocates.
  std::vector<DType> blocksAsStored, blocksFromFloats;
  /// The KV cache element types --kv-cache-dtype may ask of it (setKvCacheType); empty: it
  /// keeps its own type only.
  std::vector<DType> kvCacheTypes;
  /// Whether --int8-activations may ask it to round activations to int8 in its matrix
  /// products (setInt8Activations).
  bool int8Activations = false;
  /// With pipeline stages: whether its sends to other stages can be held (holdTransfers), so
  /// that the engine keeps a step in every stage at once. Without, a step goes through the
  /// stages alone.
  bool pipelined = false;

  /// Whether it can hold a weight in `held`, given as the checkpoint stores it in that type
  /// (`asStored`) or as fp32 values (a plain type always: it narrows them).
  bool takes(DType held, bool asStored) const {
    const std::vector<DType> &types = asStored ? blocksAsStored : blocksFromFloats;
    return !isQuantized(held) || std::find(types.begin(), types.end(), held) != types.end();
  }
};

class Backend {
public:
  virtual ~Backend() = default;

  /// Joins the rank (picks its device): the first call.
  virtual void attach(const RankInfo &rank) = 0;
  /// Once the weights, caches and arena are in place, before the first forward (a device
  /// connects its own communicator here).
  virtual void start() {}

  /// The type a weight of `desc`'s parameter and shape is stored in (the CPU's fp32, the
  /// GPU's bf16); the core writes it into the descriptions allocateWeights is given.
  virtual DType weightType(const WeightDesc &desc) const = 0;
  /// Room for every weight, in `weights` order (ModelSpec::params'), each of its dtype.
  virtual void allocateWeights(const std::vector<WeightDesc> &weights) = 0;
  /// Host fp32 memory that weight `i` lives in, which the loader writes straight into; null
  /// where it lives elsewhere or in another type, and the loader stages it (writeWeight).
  virtual float *hostWeight(size_t i) = 0;
  /// Host memory of weight `i` held in a block type (Q4_1, ...), which the loader reads the
  /// file's blocks straight into; null where the backend holds no block types.
  virtual void *hostBlocks(size_t i) { return nullptr; }
  /// Elements [offset, offset + count) of weight `i`, from fp32 `values` (the loader's
  /// staging buffer, reused once this returns).
  virtual void writeWeight(size_t i, int64_t offset, const float *values, int64_t count) = 0;
  /// --random-weights: generates weight `i` (parameter `param`, this rank's `slice`) from
  /// `seed` where it lives, or returns false to be given the values like a checkpoint's.
  virtual bool generateWeight(size_t i, uint64_t seed, const ParamDesc &param,
                              const SliceSpec &slice) = 0;

  /// The KV cache's element type (what --kv-cache-memory's bytes hold): fp32 unless a backend
  /// keeps them narrower.
  virtual DType kvCacheType() const { return DType::F32; }
  /// The KV cache's element type (--kv-cache-dtype), one of capabilities().kvCacheTypes, set
  /// before allocateCaches.
  virtual void setKvCacheType(DType) {}
  /// --int8-activations, where capabilities() say it can: before the first forward.
  virtual void setInt8Activations(bool) {}
  /// One cache per attention layer, each of its blocks of `blockSize` tokens (tpcrt/batch.h),
  /// empty; returns their bytes (--trace's kv_cache_bytes).
  virtual uint64_t allocateCaches(const std::vector<KVCacheDesc> &layers, int64_t blockSize) = 0;
  /// The forwards' activation arena, `perToken` elements for each of `tokens`; returns its
  /// bytes (--trace's arena_bytes).
  virtual uint64_t allocateArena(int64_t perToken, int64_t tokens) = 0;

  /// What it can run (the defaults: everything the CPU backend can).
  virtual BackendCapabilities capabilities() const { return {}; }
  /// Whether the program has a sequence-parallel forward, which the core runs for the token
  /// counts the program's rule gives (ModelSpec::sequenceParallelTokens).
  virtual bool hasSequenceParallel() const = 0;
  /// One forward over a step's tokens (each sequence's after what its blocks hold): this
  /// rank's logits as fp32 on the host, [step.sampledRows(), vocab] ([tokens, vocab] where
  /// the model has no tp.last_token), valid until the next call. Throws on a device's or a
  /// collective's failure, and on a step past its capabilities().
  virtual const float *forward(const Step &step, bool sequenceParallel) = 0;
  /// After a forward of a step with `argmax`, where the backend found each row's argmax
  /// instead of returning the logits: the id of each row's largest logit (the lowest of equal
  /// ones), rows as forward()'s, or a negative id for a row with a logit that is not finite
  /// (the engine fails that request); what forward() returned is then not the logits. Null
  /// where it returned the logits.
  virtual const int64_t *argmax() const { return nullptr; }
  /// With pipeline stages, on the first stage (whose forward returns null): the logits of an
  /// earlier step, `rows` rows of `cols`, that tp rank r of stage `stage` sends (the
  /// transfer `module`), as fp32 on the host, valid until the next call.
  virtual const float *receiveLogits(int64_t rows, int64_t cols, int64_t stage,
                                     const char *module);
  /// With pipeline stages (capabilities().pipelined): this rank's sends to other stages, the
  /// step descriptor's included, are held from now on until releaseTransfers() makes them.
  virtual void holdTransfers() {}
  virtual void releaseTransfers() {}
  /// How it computes, for --verbose: its kernels and libraries, as chosen on this machine.
  virtual std::string describe() const { return ""; }
  /// What it chose while running (the CPU's kernels chosen by timing), for --verbose at the
  /// end of a run; empty where nothing was.
  virtual std::string describeChoices() const { return ""; }
  /// TPC_FAULT=device: makes the device fault on purpose, so that the forward under way
  /// fails with a device error. False where the backend has no device to fault.
  virtual bool injectFault() = 0;
  /// TPC_FAULT=nan: makes the next forward write a NaN into this rank's share of the logits
  /// (its first logit of each row) before the ranks' shares are gathered, so that the step's
  /// requests fail as for a model whose logits are not finite. False where the backend cannot
  /// (no gather of logits split by vocabulary: one rank, or the CUDA target, whose gather
  /// runs on the device inside the forward).
  virtual bool poisonLogits() { return false; }
  /// TPC_FAULT=perturb: from now on this rank's attention runs with its softmax scale
  /// multiplied by 1 + kPerturbation, a subtly wrong kernel: the GPU check's negative control,
  /// which its comparison with the CPU target must catch (docs/gpu-check.md).
  virtual void perturbAttention() = 0;
  static constexpr double kPerturbation = 1.0 / 32;
};

} // namespace tpcrt

#endif // TPCRT_BACKEND_H
