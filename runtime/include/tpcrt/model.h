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
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

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

/// One collective as executed, for --trace.
struct TraceEntry {
  std::string kind, module;
  int64_t tokens;
  uint64_t bytes; // the collective's full (global) tensor, as `tpc analyze` counts it
};

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
  std::vector<std::vector<float>> weights;
  std::vector<KVCache> caches;
  float *arena = nullptr;
  uint64_t arenaBytes = 0; // what the arena's allocation asked for (the CUDA Device's, there)
  std::vector<TraceEntry> trace;
  std::vector<float> scratch;
  DeviceHooks *device = nullptr; // set by a backend with state of its own

  /// Every KV cache empty again, the backend's too: the next forward starts a new sequence.
  void resetCaches();

  const float *weight(size_t i) const { return weights[i].data(); }
  /// Stops this rank with an error (the others fail on their next collective).
  [[noreturn]] void fail(const std::string &message) const;

  // Collectives over [rows, cols] row-major matrices. `blocks` are the global sizes of the
  // strided blocks of a feature dim (one block: a plain Shard); local matrices hold this
  // rank's ceil(size / tp) piece of each block, padded.
  void allReduce(const float *in, int64_t rows, int64_t cols, float *out, const char *module);
  void allGatherColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                        float *out, const char *module);
  void allGatherRows(const float *in, int64_t rows, int64_t cols, float *out,
                     const char *module);
  void reduceScatterColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                            float *out, const char *module);
  void reduceScatterRows(const float *in, int64_t rows, int64_t cols, float *out,
                         const char *module);
  /// Shard(0) -> Shard(1) (rowsToColumns) or back: `tokens` global, `blocks` the features.
  void allToAll(const float *in, int64_t tokens, const std::vector<int64_t> &blocks,
                bool rowsToColumns, float *out, const char *module);
  // Reshards that need no communication.
  void takeColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks, float *out);
  void takeRows(const float *in, int64_t rows, int64_t cols, float *out);
  void partialFromReplicate(const float *in, int64_t n, float *out);
  void partialFromColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                          float *out);
  void partialFromRows(const float *in, int64_t tokens, int64_t cols, float *out);

  /// Notes a collective for --trace (the CUDA backend's own collectives call it too).
  void record(const char *kind, const char *module, int64_t rows, uint64_t bytes);
};

/// A dim of `size` split over `tp` ranks: each holds ceil(size / tp), the last ones padded.
int64_t pieceSize(int64_t size, int64_t tp);
/// The local and the global width of a feature dim made of strided `blocks`.
int64_t localWidth(const std::vector<int64_t> &blocks, int64_t tp);
int64_t globalWidth(const std::vector<int64_t> &blocks);

/// Calls fn(localOffset, globalOffset, count, piece) for rank `rank`'s piece of each block of
/// a feature dim: where it sits in the local row, where in the global row, how many of its
/// `piece` columns are real (the rest is padding).
template <typename Fn>
void forEachPiece(const std::vector<int64_t> &blocks, int tp, int rank, Fn fn) {
  int64_t localOffset = 0, globalOffset = 0;
  for (int64_t block : blocks) {
    int64_t piece = pieceSize(block, tp), first = rank * piece;
    fn(localOffset, globalOffset + first, std::max<int64_t>(0, std::min(piece, block - first)),
       piece);
    localOffset += piece;
    globalOffset += block;
  }
}

/// The emitted binary's main: arguments, rank identity, weights, prefill and greedy decode.
int runModel(const ModelSpec &spec, int argc, char **argv);

} // namespace tpcrt

#endif // TPCRT_MODEL_H
