// A step: what one forward computes, for any number of sequences at once. Rank 0's scheduler
// (runtime/engine/scheduler.cpp) plans one and sends it to every rank; a forward reads it through
// its context (the ops that are per token need nothing of it; the attention reads each
// sequence's keys and values through its block table, and tp.last_token's rows are the last
// token of each sequence the step samples, or more of its last tokens where the engine
// scores a prompt).
//
// The KV cache is paged: each layer's keys and values live in fixed-size blocks of
// `blockSize` tokens, and a sequence's block table lists the blocks holding its tokens in
// order, so token p of a sequence is in block table[p / blockSize] at p % blockSize.
#ifndef TPCRT_BATCH_H
#define TPCRT_BATCH_H

#include <cstdint>
#include <vector>

namespace tpcrt {

/// One sequence's part of a step: tokens [first, first + count) of the step, at positions
/// cached, cached + 1, ... (its cache holds `cached` tokens before them).
struct StepSequence {
  int64_t first = 0, count = 0, cached = 0;
  /// Its block tables, ceil((cached + count) / blockSize) long, one per KV group
  /// (tpcrt/kv_groups.h), Step::tableStride apart: group 0's first. A group whose layers
  /// read a window or chunks has -1 for the blocks before the first its step reads.
  const int32_t *blocks = nullptr;
  /// The forward returns the logits of its last `logits` tokens (0 to count): 1 where its
  /// next token is sampled, more where a prompt's own tokens are scored (prompt logprobs).
  int64_t logits = 0;
};

struct Step {
  const int64_t *ids = nullptr, *positions = nullptr;
  int64_t tokens = 0;
  std::vector<StepSequence> sequences;
  /// Where a sequence's table of KV group g starts: its `blocks` + g * tableStride.
  int64_t tableStride = 0;
  /// Every sampled row is greedy, with nothing that reads the whole row (a penalty,
  /// logprobs, dumped logits): a backend that can returns each row's argmax
  /// (Backend::argmax) instead of its logits: the CPU program where its gather of the logits
  /// is marked argmax_if_greedy (found on the ranks, the logits not gathered), the CUDA
  /// device always (found on the device, only the ids copied to the host).
  bool argmax = false;
  /// The rows the forward returns logits for: each sequence's `logits`, in the step's order.
  int64_t sampledRows() const {
    int64_t rows = 0;
    for (const StepSequence &s : sequences)
      rows += s.logits;
    return rows;
  }
};

} // namespace tpcrt

#endif // TPCRT_BATCH_H
