// The engine core: many requests at once on the group's ranks, continuous batching decided on
// rank 0 alone. Each step, rank 0's scheduler (scheduler.h) chooses which sequences run and how
// many of their tokens, placing their keys and values in the block pool's blocks
// (block_pool.h); the step codec (step_codec.h) sends every rank the step as one fixed-layout
// descriptor; every rank runs the same forward from it; rank 0 samples. A peer decides
// nothing: it runs the descriptors it is sent until one says the run is over, so the ranks
// cannot fall out of step. `tpc run`'s single prompt, --requests and `tpc serve` all run
// through this one loop.
//
// With pipeline stages the descriptor goes to the first stage's ranks, and each stage's rank
// passes it to the rank of the same tp index in the next stage with its activations. The
// last stage sends the logits back to the first, where the engine receives them. Where the
// backend can hold its sends (capabilities().pipelined), rank 0 keeps up to a step per stage
// in flight, vLLM's virtual engines: each step takes about its share of the live sequences,
// a sequence in flight waits for its logits, and each step's forward on the first stage runs
// while the later stages compute the steps before it. Before its sends go, the first stage
// receives the logits of the step that would otherwise block them (the oldest, once every
// other stage holds one), so no two ranks wait on each other.
#ifndef TPCRT_ENGINE_ENGINE_H
#define TPCRT_ENGINE_ENGINE_H

#include "request.h"
#include "scheduler.h"
#include "step_codec.h"
#include "tpcrt/backend.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <unordered_map>
#include <vector>

namespace tpcrt {

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
  /// `limits` as the flags give them.
  Engine(const ModelSpec &spec, Backend &backend, const RankInfo &rank, EngineLimits limits);
  ~Engine();

  /// Rank 0: queues a request, arriving now (a request with no tokens to make is finished at
  /// once, "length"); returns its handle, which the hooks and request() name it by. Requests
  /// may arrive between any two steps.
  size_t submit(EngineRequest request);
  /// Rank 0: as submit(), but queued only once request `leader`'s prompt is computed (its
  /// first token chosen, or it ended), so that a request of the same prompt finds the
  /// leader's blocks in the prefix cache instead of computing them beside it: the choices of
  /// a request with n > 1. At once where the leader has ended or is not known.
  size_t submitAfter(EngineRequest request, size_t leader);
  /// Rank 0: whether a request is waiting or running, or a step's logits are still to come.
  bool busy() const { return scheduler.busy() || !inFlight.empty(); }
  /// Rank 0: one step, when busy: schedules, sends every rank the step, runs its forward and
  /// samples, telling `hooks`.
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
  /// How long rank 0 lets pass without a step: well inside --timeout.
  std::chrono::milliseconds heartbeat() const;
  /// Rank 0: runs `work` (its own, as reading a tokenizer or a requests file) on another
  /// thread, sending idle steps until it is done, so that the peers do not give up on rank 0
  /// however long it takes. Returns what `work` returns, or throws what it throws; throws
  /// as idle() does when a peer is gone (after `work` ends).
  template <typename Work> auto idleWhile(Work work) -> decltype(work());
  /// The other ranks: run rank 0's steps until it stops.
  void follow(const EngineHooks &hooks = {});

  /// Rank 0: runs every request to its end, as many at once as the limits allow, telling
  /// `hooks` as it goes (naming each by its index in `requests`), then stops. The other ranks
  /// pass no requests: they follow rank 0's steps until it stops.
  void run(std::vector<EngineRequest> &requests, const EngineHooks &hooks = {});

  /// Rank 0: requests running and waiting, and the KV cache's free and total blocks.
  int64_t runningCount() const { return int64_t(scheduler.running().size()); }
  int64_t waitingCount() const { return int64_t(scheduler.waiting().size()); }
  int64_t freeBlocks() const { return scheduler.blocks().available(); }
  int64_t totalBlocks() const { return scheduler.blocks().total(); }
  /// Of the free blocks, those that hold a cached prefix (evictable); the prefix cache's
  /// queried and found tokens so far.
  int64_t cachedBlocks() const { return scheduler.blocks().evictable(); }
  int64_t prefixQueries() const { return scheduler.prefixQueries(); }
  int64_t prefixHits() const { return scheduler.prefixHits(); }
  /// Steps run, preemptions, and each step's wall time in ms (forward and sampling; with
  /// pipeline stages, on rank 0, from its schedule to its logits).
  int64_t steps() const { return stepCount; }
  int64_t preemptions() const { return scheduler.preemptions(); }
  const std::vector<double> &stepMs() const { return stepTimes; }

private:
  struct Entry;
  /// A sequence's place in a step: whose, where among the step's tokens, the position of
  /// its first, and its rows of logits (Scheduled::logitsRows), the last of them sampled
  /// where `sampled`.
  struct StepRow {
    size_t handle;
    bool sampled;
    int64_t first, count, start, logits;
  };
  /// Pipeline stages: a step whose logits have not come back, its rows and how many, and
  /// when rank 0 scheduled it.
  struct InFlight {
    std::vector<StepRow> rows;
    int64_t logitsRows;
    bool argmax; // Step::argmax: its rows come back as ids
    std::chrono::steady_clock::time_point start;
  };
  /// What comes back of a step from the last stage: its rows of logits, or (an argmax step)
  /// each row's id, a negative one where a logit was not finite.
  struct Collected {
    const float *logits = nullptr;
    const int64_t *chosen = nullptr;
  };
  /// Sends rank 0's descriptor to every rank (into `d` on each); with pipeline stages, to
  /// the first stage's.
  void share(std::vector<int64_t> &d);
  /// Pipeline stages: rank 0's step (stepStaged), the first stage's part of a step on each of
  /// its ranks (runFirstStage, which returns the logits `after` receives, else null), the
  /// other stages' loop (followStage), and the descriptor to the next stage.
  void stepStaged(const EngineHooks &hooks);
  Collected runFirstStage(const std::vector<int64_t> &d, const EngineHooks &hooks,
                          const std::function<void(const Collected &)> &before);
  void followStage(const EngineHooks &hooks);
  void passOn(const std::vector<int64_t> &d);
  /// Rank 0: the logits of the oldest step in flight, received and sampled (finish).
  void collectOldest(const EngineHooks &hooks);
  void finish(const InFlight &step, const Collected &collected, const EngineHooks &hooks);
  Collected receiveLogits(int64_t rows, bool ids);
  /// The rows of logits a step of `plan` makes.
  int64_t logitsRowsOf(const std::vector<Scheduled> &plan) const;
  std::vector<StepRow> rowsOf(const std::vector<Scheduled> &plan) const;
  const float *forward(const Step &step, const EngineHooks &hooks);
  /// Rank 0: whether every row `plan` samples needs its argmax alone, or (`draws`: the
  /// backend picks by a Draw, capabilities().draws) its draw alone, so that the backend may
  /// pick its token and not return the logits (Step::argmax).
  bool argmaxOnly(const std::vector<Scheduled> &plan, const EngineHooks &hooks, bool draws);
  /// Rank 0, after a step's forward: the next token of each sequence it sampled (`rows`, in
  /// the step's order; a request ended meanwhile is passed over), and the stop rules.
  /// `chosen`: each row's argmax where the ranks found it, else null.
  void sample(const std::vector<StepRow> &rows, const float *logits, const int64_t *chosen,
              const EngineHooks &hooks);
  /// Ends one sequence's request with an error (its logits not finite): that request alone,
  /// the others run on.
  void fail(Sequence *s, const std::string &why, const EngineHooks &hooks);
  /// Ends a running request for `reason` ("stop", "length", "error"): its followers queued,
  /// its blocks free, the hook told.
  void end(Entry &e, const char *reason, const EngineHooks &hooks);
  /// submit()'s entry for a request, queued or (`queue` false) left for its leader to queue.
  size_t enter(EngineRequest request, bool queue);
  /// Queues the requests submitted after `e`'s (submitAfter) that are still waiting for it.
  void releaseFollowers(Entry &e);

  const ModelSpec &spec;
  Backend &backend;
  const RankInfo &rank;
  BackendCapabilities can; // the backend's, asked once
  EngineLimits limits;
  StepCodec codec;
  Scheduler scheduler; // rank 0's
  int64_t stepCount = 0;
  std::vector<double> stepTimes;
  std::vector<int64_t> gathered; // every rank's descriptor, from share()
  /// Pipeline stages: whether several steps are in flight at once, and those that are, oldest
  /// first.
  bool pipelined = false;
  std::deque<InFlight> inFlight;
  std::vector<int64_t> receivedIds; // receiveLogits' ids of an argmax step
  std::vector<uint32_t> allowed;    // sample()'s: a constraint's tokens, a bit each
  std::vector<float> masked;        // sample()'s: a row with the others' logits -inf

  std::unordered_map<size_t, Entry> entries; // by handle; nodes stay put, so pointers hold
  size_t nextHandle = 0;
  // A step's buffers, kept from step to step.
  std::vector<int64_t> descriptor;
  std::vector<PlannedSequence> planned;
  DecodedStep current;
};

template <typename Work> auto Engine::idleWhile(Work work) -> decltype(work()) {
  auto done = std::async(std::launch::async, std::move(work));
  try {
    while (done.wait_for(heartbeat()) != std::future_status::ready)
      idle();
  } catch (...) {
    done.wait(); // `work` may use what the caller is about to unwind
    throw;
  }
  return done.get();
}

} // namespace tpcrt

#endif // TPCRT_ENGINE_ENGINE_H
