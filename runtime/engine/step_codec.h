// The step descriptor: what rank 0 sends every rank each step, and the one place it is
// written and read. It is int64 throughout and of one length for the whole run, fixed by the
// limits alone, so every rank knows how much to receive before it knows what the step holds:
//
//   header         kind, tokens, sequences, argmax, collect before, after, and whether
//                  each comes as ids                                       (StepHeader)
//   ids            the step's token ids                  maxTokens slots
//   per sequence   first, count, cached, logits, and     maxSequences x 9  (SequenceFields)
//                  its draw (a double's bits a word)
//   block tables   each sequence's blocks, in order      maxSequences x blocksPerSequence
//                  per KV group (group 0's, then each window group's)
//
// A peer runs exactly the step it decodes; decoding checks every count, offset and block
// against the layout, so a corrupt descriptor is an error and never a read out of bounds.
#ifndef TPCRT_ENGINE_STEP_CODEC_H
#define TPCRT_ENGINE_STEP_CODEC_H

#include "tpcrt/batch.h"
#include "tpcrt/kv_groups.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tpcrt {

/// What a descriptor tells the ranks.
enum class StepKind : int64_t {
  End = 0,  // the run is over: the peers return
  Run = 1,  // a forward of the step that follows
  Idle = 2, // nothing to run yet: a server's heartbeat between requests
  Collect = 3, // pipeline stages: no forward, the first stage receives a step's logits
};

/// Pipeline stages: the rows of logits of a step the first stage's ranks receive from the
/// last stage (-1: none), after this step's forward and before its held sends go (`before`:
/// an earlier step's), or after them (`after`: this step's own, when a step goes through the
/// stages alone); each as ids where that step was an argmax step (Step::argmax: the last
/// stage sends each row's argmax, one id a row, not the row).
struct StepCollect {
  int64_t before = -1, after = -1;
  bool beforeIds = false, afterIds = false;
};

/// The descriptor's fixed size, the same on every rank: from the engine's limits.
struct StepLayout {
  int64_t maxTokens = 1;         // --max-batch-tokens
  int64_t maxSequences = 1;      // --max-num-seqs
  int64_t blocksPerSequence = 1; // ceil(--max-model-len / block size)
  int64_t blockSize = 16;        // tokens per KV block
  int64_t blocks = 1;            // the KV cache's blocks, which a table may name
  /// The window groups (EngineLimits::windowBlocks): the keys each reads, and its blocks. A
  /// table of one names -1 for the blocks before the first its step reads.
  std::vector<KvReach> windowReaches;
  std::vector<int64_t> windowBlocks;

  int64_t groups() const { return 1 + int64_t(windowBlocks.size()); }
};

/// The descriptor's first words.
struct StepHeader {
  int64_t kind = int64_t(StepKind::End);
  int64_t tokens = 0, sequences = 0;
  int64_t argmax = 0; // Step::argmax
  int64_t collectBefore = -1, collectAfter = -1; // StepCollect
  int64_t collectBeforeIds = 0, collectAfterIds = 0;
};

/// One sequence's words.
struct SequenceFields {
  int64_t first = 0, count = 0, cached = 0;
  int64_t logits = 0; // StepSequence::logits
  /// StepSequence::draw: its doubles' bits, and top_k.
  int64_t temperature = 0, topK = 0, topP = 0, minP = 0, u = 0;
};

/// One sequence of a step, as rank 0 planned it: `count` tokens from `tokens`, after the
/// `cached` ones its `blocks` already hold.
struct PlannedSequence {
  const int64_t *tokens = nullptr;
  int64_t count = 0, cached = 0;
  int64_t logits = 0; // StepSequence::logits
  const std::vector<int32_t> *blocks = nullptr;
  /// Its tables of the window groups, as long as `blocks` (none where there are none).
  const std::vector<std::vector<int32_t>> *windowBlocks = nullptr;
  Draw draw; // StepSequence::draw
};

/// A decoded step and the storage its pointers point into (kept from step to step).
struct DecodedStep {
  Step step;
  std::vector<int64_t> ids, positions;
  std::vector<int32_t> tables;
};

class StepCodec {
public:
  explicit StepCodec(const StepLayout &layout) : layout(layout) {}

  /// The descriptor's length in int64 words.
  size_t length() const;
  /// A Run descriptor of `plan` into `d`.
  void encode(const std::vector<PlannedSequence> &plan, bool argmax, StepCollect collect,
              std::vector<int64_t> &d) const;
  /// A descriptor that carries no step (End, Idle, or Collect of `collect.before` rows)
  /// into `d`.
  void encodeSignal(StepKind kind, std::vector<int64_t> &d, StepCollect collect = {}) const;
  /// The kind of a received descriptor; an unknown kind is an internal error.
  StepKind kind(const std::vector<int64_t> &d) const;
  /// The rows of logits a received descriptor has the first stage receive, each checked
  /// against the layout.
  StepCollect collect(const std::vector<int64_t> &d) const;
  /// A Run descriptor into `out`, every field checked against the layout.
  void decode(const std::vector<int64_t> &d, DecodedStep &out) const;

private:
  size_t sequencesOffset() const;
  size_t tablesOffset() const;

  StepLayout layout;
};

} // namespace tpcrt

#endif // TPCRT_ENGINE_STEP_CODEC_H
