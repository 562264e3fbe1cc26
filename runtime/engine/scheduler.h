// Rank 0's scheduler: which sequences a step computes, how many of their tokens, and where
// their keys and values go. It sees sequences as token lists and block tables only (no model,
// no ranks, no sampling), so its policy is tested on its own (test/unit/SchedulerTest.cpp).
//
// Each step, under the token budget (--max-batch-tokens) and --max-num-seqs:
//   1. The running sequences, oldest first, each with what it has not computed yet: one token
//      for a decode, the rest of its prompt (as much as the budget leaves: a chunk) for a
//      prefill. Decodes thus keep running while a long prompt is prefilled in chunks.
//   2. Then waiting sequences, in arrival order, while the budget, --max-num-seqs and the free
//      blocks allow.
// A sequence gets KV blocks as its tokens need them. When none are free, the newest running
// sequence is preempted: its blocks are freed and it goes back to the front of the queue, to
// be recomputed (its prompt and what it has generated, prefilled again) when blocks free up.
// Recomputing rather than swapping to other memory, as vLLM does by default: on a CPU the
// cache lives in the same memory a swap would go to, and the newest sequence has the least
// computed to lose. A step that had to preempt admits nobody: the blocks are short already.
//
// With prefix caching (EngineLimits::prefixCaching, on unless --no-prefix-caching), a sequence
// admitted with nothing computed (new, or preempted) first looks its tokens up in the block
// pool's cache a full block at a time, and holds the blocks found, its longest cached prefix:
// its prefill starts after them. Its last token is always computed (its logits choose the
// next), so a prefix is at most the full blocks before it. Once a step has computed a block
// full, the cache learns what it holds (Scheduler::computed), so a later sequence, or this
// one recomputed after a preemption, may find it. A sequence never writes a full block
// again, so the blocks it shares are only read.
//
// A sequence that scores its prompt (prompt logprobs) wants the logits of the rows it scores:
// it takes no cached prefix while it wants any, and a step computes at most
// EngineLimits::scoredRows of them for it (its prompt chunked to fit), so that what a step
// returns stays bounded.
//
// With pipeline stages several steps are in flight at once, each in another stage. A
// sequence in one of them (inFlight) has no next token yet: it is neither scheduled nor
// preempted until its step's logits are back, so the one preempted is the newest not in
// flight. A sequence short of blocks that is the newest not in flight only because newer ones
// are in flight waits for them (and nobody is admitted meanwhile) rather than preempt itself,
// so that the oldest always makes progress. Its blocks may be given to another sequence
// once it finishes or is taken out, even while its step is still in a later stage: every
// stage runs the steps in order, so that step is done with them there before a later one
// writes them.
#ifndef TPCRT_ENGINE_SCHEDULER_H
#define TPCRT_ENGINE_SCHEDULER_H

#include "block_pool.h"
#include "tpcrt/kv_groups.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace tpcrt {

/// What the engine may hold at once (the flags of the same names).
struct EngineLimits {
  int64_t maxNumSeqs = 1;     // --max-num-seqs: sequences in one step
  int64_t maxBatchTokens = 1; // --max-batch-tokens: tokens in one step
  int64_t blocks = 1;         // the KV cache's blocks (--kv-cache-tokens / block size)
  int64_t blockSize = 16;     // tokens per block (the program's)
  int64_t maxSeqLen = 1;      // --max-model-len: the longest sequence (prompt + output)
  bool prefixCaching = false; // the engine's is on unless --no-prefix-caching
  /// The most rows of logits a sequence that scores its prompt asks of one step: its prompt
  /// is cut into chunks of as many, so that what a step returns stays bounded (a row is a
  /// vocabulary's floats on every rank that receives it).
  int64_t scoredRows = 128;
  /// The KV cache's groups (tpcrt/kv_groups.h): which group each layer is in and the keys
  /// each group reads. `blocks` is group 0's pool; windowBlocks[g - 1] the pool of group g,
  /// whose tables give back the blocks no later query of the group reads. Without groups
  /// (empty, or group 0 alone), every layer reads every key.
  KvGroups groups;
  std::vector<int64_t> windowBlocks;

  int64_t blocksFor(int64_t tokens) const { return (tokens + blockSize - 1) / blockSize; }
  size_t windows() const { return windowBlocks.size(); }
  /// The keys window group w (group w + 1) reads.
  const KvReach &windowReach(size_t w) const { return groups.reaches[w + 1]; }
};

/// A sequence as the scheduler keeps it; its owner (the engine) keeps it in place while the
/// scheduler holds it.
struct Sequence {
  size_t handle = 0;           // the owner's name for it
  std::vector<int64_t> tokens; // the prompt, then what it has generated
  std::string salt;            // its request's cache_salt: the prefix cache's first blocks
  int64_t computed = 0;        // tokens whose keys and values are in its blocks
  std::vector<int32_t> blocks; // its block table (KV group 0's)
  /// Its tables of the window groups (EngineLimits::windowBlocks), as long as `blocks`; a
  /// block no later query of the group reads is given back and its entry is -1.
  std::vector<std::vector<int32_t>> windowBlocks;
  int64_t preempted = 0;       // times its blocks were taken back
  bool inFlight = false;       // in a step whose logits are not back yet (pipeline stages)
  int64_t cachedTokens = 0;    // tokens found in the prefix cache when it was first admitted
  // The prefix cache's chain: how many of its table's blocks the cache knows (found there, or
  // published), and the block the next one follows as the cache has it, with that block's
  // generation then.
  int64_t chained = 0;
  int32_t chainParent = -1;
  uint64_t chainGeneration = 0;
  // Prompt scoring (prompt logprobs): the positions whose rows of logits the owner still
  // wants, [scoreFrom, scoreTo); it moves scoreFrom on as they come. While some are wanted the
  // sequence takes no prefix from the cache: the rows it scores are computed.
  int64_t scoreFrom = 0, scoreTo = 0;

  int64_t pending() const { return int64_t(tokens.size()) - computed; }
  bool scoring() const { return scoreFrom < scoreTo; }
};

/// One sequence's part of a step: `count` tokens from `computed` on.
struct Scheduled {
  Sequence *sequence = nullptr;
  int64_t count = 0;
  /// The step computes the last token the sequence has: its next token is sampled after it.
  /// Asked before Scheduler::computed moves `computed` past the step's tokens.
  bool sampled() const { return sequence->computed + count == int64_t(sequence->tokens.size()); }
  /// The rows of logits the step returns for it (StepSequence::logits): its last token's
  /// where it samples; where it scores some of the step's tokens, every row from the first of
  /// those to its last. Asked, as sampled(), before Scheduler::computed.
  int64_t logitsRows() const {
    int64_t end = sequence->computed + count;
    int64_t from = std::max(sequence->computed, sequence->scoreFrom);
    if (from < std::min(end, sequence->scoreTo))
      return end - from;
    return sampled() ? 1 : 0;
  }
};

class Scheduler {
public:
  explicit Scheduler(const EngineLimits &limits);

  /// A new sequence, waiting at the back of the queue.
  void add(Sequence *s) { waitingQueue.push_back(s); }
  /// The next step's sequences, at most `most` (0: --max-num-seqs), their blocks allocated
  /// for the tokens it computes; empty when none is waiting or running, or when every one
  /// that could run is in flight. It may preempt (see above).
  std::vector<Scheduled> schedule(int64_t most = 0);
  /// After the step's forward: its tokens are computed.
  void computed(const std::vector<Scheduled> &step);
  /// A running sequence has its last token: its blocks are free for the next step.
  void finish(Sequence *s);
  /// Takes a sequence out wherever it is (a client went away): its blocks are free.
  void remove(Sequence *s);

  bool busy() const { return !waitingQueue.empty() || !runningList.empty(); }
  const std::vector<Sequence *> &running() const { return runningList; } // oldest first
  const std::deque<Sequence *> &waiting() const { return waitingQueue; }
  const BlockPool &blocks() const { return pool; }
  /// Window group w's pool (EngineLimits::windowBlocks).
  const BlockPool &windowBlocks(size_t w) const { return windowPools[w]; }
  int64_t preemptions() const { return preemptionCount; }
  /// The prefix cache's lookups so far (vLLM's counters): the tokens of the sequences
  /// admitted with nothing computed, and how many of them were found cached.
  int64_t prefixQueries() const { return queriedTokens; }
  int64_t prefixHits() const { return hitTokens; }

private:
  /// Blocks for `count` more tokens of `s` (there are enough).
  void grow(Sequence *s, int64_t count);
  /// Whether every group has the blocks `count` more tokens of `s` need.
  bool fits(const Sequence &s, int64_t count) const;
  /// `count` tokens from `start` of a sequence whose window tables are `tables`, fewer (but
  /// one) where a window group has not the blocks for them: a long prompt's chunk needs more
  /// of them than its decode steps will.
  int64_t clipWindows(const std::vector<std::vector<int32_t>> &tables, int64_t start,
                      int64_t count) const;
  /// Gives back the blocks of `s`'s window tables that no later query of their group reads.
  void dropUnread(Sequence &s);
  /// Gives back every block of `s` and empties its tables.
  void releaseBlocks(Sequence &s);
  /// The newest running sequence not in flight, or null.
  Sequence *newestNotInFlight() const;
  /// Takes the blocks of the newest running sequence not in flight back, queueing it first
  /// to be recomputed; returns it, or null when every running sequence is in flight.
  Sequence *preemptNewest();
  /// `count` of `s`'s tokens, fewer where that would return more than limits.scoredRows rows
  /// of logits for it.
  int64_t clipScored(const Sequence &s, int64_t count) const;
  /// Admits waiting sequences into `plan` while `budget`, `most` and the blocks allow.
  void admit(std::vector<Scheduled> &plan, int64_t &budget, int64_t most);
  /// The cached blocks holding the longest prefix of `s`'s tokens, up to the full blocks
  /// before its last token, for which every window group has cached the blocks the first
  /// token after it reads: group 0's, and in `windowed` each window group's table (-1
  /// before those).
  std::vector<int32_t> cachedPrefix(const Sequence &s,
                                    std::vector<std::vector<int32_t>> &windowed) const;
  /// Tells the cache what `s`'s blocks that are newly full hold.
  void publish(Sequence &s);

  EngineLimits limits;
  BlockPool pool;
  // The window groups' pools. A window group's full block is cached under group 0's block at
  // the same place (and its generation), which names every token before it: its prefix.
  std::deque<BlockPool> windowPools;
  std::deque<Sequence *> waitingQueue;
  std::vector<Sequence *> runningList;
  int64_t preemptionCount = 0;
  int64_t queriedTokens = 0, hitTokens = 0;
};

} // namespace tpcrt

#endif // TPCRT_ENGINE_SCHEDULER_H
