// The engine: many requests at once on the group's ranks, continuous batching decided on rank
// 0 alone. Each step, rank 0's scheduler chooses which sequences run and how many of their
// tokens (decodes first, then prompts in chunks, under a token budget), places their keys and
// values in the paged KV cache's blocks, and sends every rank one fixed-layout step
// descriptor; every rank runs the same forward from it; rank 0 samples. A peer decides
// nothing: it runs the descriptors it is sent until one says the run is over, so the ranks
// cannot fall out of step.
#ifndef TPCRT_CORE_ENGINE_H
#define TPCRT_CORE_ENGINE_H

#include "tpcrt/backend.h"
#include "tpcrt/sampling.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace tpcrt {

/// What the engine may hold at once (the flags of the same names).
struct EngineLimits {
  int64_t maxNumSeqs = 1;      // --max-num-seqs: sequences in one step
  int64_t maxBatchTokens = 1;  // --max-batch-tokens: tokens in one step
  int64_t blocks = 1;          // the KV cache's blocks (--kv-cache-tokens / block size)
  int64_t blockSize = 16;      // tokens per block (the program's)
  int64_t maxSeqLen = 1;       // --max-seq-len: the longest sequence (prompt + output)
};

/// One request, as rank 0's engine runs it, and what came of it.
struct EngineRequest {
  std::vector<int64_t> prompt;
  int64_t maxTokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stopIds; // end-of-sequence ids (unless ignored) and stop ids
  int logprobs = -1;            // -1: none
  /// Teacher forcing (--force-ids): the tokens fed back instead of the chosen ones, which
  /// are still the output; the stop rules are then ignored, as max_tokens alone ends it.
  std::vector<int64_t> forced;

  std::vector<int64_t> output;
  std::vector<TokenLogprobs> outputLogprobs;
  const char *finishReason = nullptr; // "stop", "length" or "abort", once finished
  int64_t preempted = 0;              // times its blocks were taken back and it was recomputed
  double firstTokenMs = 0, finishedMs = 0; // since it arrived (submit)
};

/// What a run tells its caller. All optional.
struct EngineHooks {
  /// Rank 0: token `id` of request i, as it is chosen; true ends the request there (a stop
  /// string met in its text).
  std::function<bool(size_t, int64_t)> onToken;
  /// Rank 0: request i has its last token.
  std::function<void(size_t)> onFinish;
  /// Rank 0: the logits request i's next token is chosen from (vocab of them).
  std::function<void(size_t, const float *)> onLogits;
  /// Every rank, before step n's forward (0 is the first): TPC_FAULT strikes here.
  std::function<void(int64_t)> beforeStep;
};

class Engine {
public:
  Engine(const ModelSpec &spec, Backend &backend, const RankInfo &rank, EngineLimits limits);
  ~Engine();

  /// Rank 0: queues a request, arriving now (a request with no tokens to make is finished at
  /// once, "length"); returns its handle, which the hooks and request() name it by. Requests
  /// may arrive between any two steps.
  size_t submit(EngineRequest request);
  /// Rank 0: whether a request is waiting or running.
  bool busy() const { return !waitingQueue.empty() || !runningList.empty(); }
  /// Rank 0: one step, when busy: schedules (running sequences oldest first, then waiting
  /// ones), sends every rank the step, runs its forward and samples, telling `hooks`.
  void step(const EngineHooks &hooks = {});
  /// Rank 0: ends request `handle` now, its blocks free for the next step (a client that
  /// went away); finishReason "abort". Nothing for a request already finished.
  void abort(size_t handle);
  /// Rank 0: request `handle` and what has come of it so far.
  EngineRequest &request(size_t handle);
  /// Rank 0: forgets a finished (or aborted) request; its handle is not reused.
  void forget(size_t handle);
  /// Rank 0: tells the other ranks that there are no more steps (they return from follow()).
  void stop();
  /// Rank 0, with nothing to run (a server between requests): a step that computes nothing,
  /// so that the peers, waiting in follow() under --timeout, know rank 0 is alive, and rank 0
  /// learns that they are (it throws when one is gone).
  void idle();
  /// The other ranks: run rank 0's steps until it stops.
  void follow(const EngineHooks &hooks = {});

  /// Rank 0: runs every request to its end, as many at once as the limits allow, telling
  /// `hooks` as it goes (naming each by its index in `requests`), then stops. The other ranks
  /// pass no requests: they follow rank 0's steps until it stops.
  void run(std::vector<EngineRequest> &requests, const EngineHooks &hooks = {});

  /// Rank 0: requests running and waiting, and the KV cache's free and total blocks.
  int64_t runningCount() const { return int64_t(runningList.size()); }
  int64_t waitingCount() const { return int64_t(waitingQueue.size()); }
  int64_t freeBlocks() const { return int64_t(freeList.size()); }
  int64_t totalBlocks() const { return limits.blocks; }
  /// Steps run, preemptions, and each step's wall time in ms (forward and sampling).
  int64_t steps() const { return stepCount; }
  int64_t preemptions() const { return preemptionCount; }
  const std::vector<double> &stepMs() const { return stepTimes; }

private:
  struct Sequence;
  struct Entry;
  /// The descriptor's length, in int64: the same on every rank, from the limits alone.
  size_t descriptorLength() const;
  /// Every rank: the step a descriptor describes (`tables` keeps its block tables).
  void readDescriptor(const std::vector<int64_t> &d, std::vector<int64_t> &ids,
                      std::vector<int64_t> &positions, std::vector<int32_t> &tables, Step &step);
  /// Sends rank 0's descriptor to every rank (into `d` on each).
  void share(std::vector<int64_t> &d);
  const float *forward(const Step &step, const EngineHooks &hooks);
  /// Rank 0: frees a sequence's blocks.
  void release(Sequence *s);
  /// Rank 0: takes the newest running sequence's blocks back, queueing it first to be
  /// recomputed; returns it.
  Sequence *preemptNewest();

  const ModelSpec &spec;
  Backend &backend;
  const RankInfo &rank;
  EngineLimits limits;
  int64_t blocksPerSequence;
  int64_t stepCount = 0, preemptionCount = 0;
  std::vector<double> stepTimes;
  std::vector<int64_t> gathered; // every rank's descriptor, from share()

  // Rank 0's scheduler state.
  std::unordered_map<size_t, Entry> entries; // by handle; nodes stay put, so pointers hold
  size_t nextHandle = 0;
  std::deque<Sequence *> waitingQueue;
  std::vector<Sequence *> runningList; // oldest first
  std::vector<int32_t> freeList;       // popped from the back: block 0 first
  // A step's buffers, kept from step to step.
  std::vector<int64_t> descriptor, stepIds, stepPositions;
  std::vector<int32_t> stepTables;
  Step current;
};

} // namespace tpcrt

#endif // TPCRT_CORE_ENGINE_H
