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
#include <string>
#include <vector>

namespace tpcrt {

/// How a backend that picks tokens itself (Step::argmax) picks a sequence's sampled row:
/// vLLM's temperature, top_k, top_p and min_p as the request's sampler has them, and the
/// uniform number in [0, 1) that rank 0 drew for this token from the request's generator
/// (Sampler::draw), so that the pick is the token the host's Sampler would choose from the same
/// row. Temperature 0 is greedy: the row's argmax, and no number drawn.
struct Draw {
  double temperature = 0;
  int64_t topK = 0; // 0 or -1: every token
  double topP = 1, minP = 0;
  double u = 0;

  bool greedy() const { return temperature == 0; }
  /// "" when the fields are a draw's (temperature 0 or positive and finite, top_k at least -1,
  /// top_p in (0, 1], min_p in [0, 1], u in [0, 1)), else which is not: a step descriptor's
  /// check.
  std::string check() const;
};

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
  /// Where the step's rows come back as token ids (Step::argmax): how its sampled row's id is
  /// picked (its other rows, if any, come back as their argmax).
  Draw draw;
};

struct Step {
  const int64_t *ids = nullptr, *positions = nullptr;
  int64_t tokens = 0;
  std::vector<StepSequence> sequences;
  /// Where a sequence's table of KV group g starts: its `blocks` + g * tableStride.
  int64_t tableStride = 0;
  /// Every sampled row is picked by its sequence's draw alone, with nothing that reads the
  /// whole row (a penalty, a bias, a grammar, logprobs, dumped logits), and greedy where the
  /// backend has no sampler of its own (BackendCapabilities): a backend that can returns each
  /// row's token id (Backend::argmax) instead of its logits: the CPU program where its gather
  /// of the logits is marked argmax_if_greedy (the argmax found on the ranks, the logits not
  /// gathered), the CUDA device always (picked on the device, only the ids copied back).
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
