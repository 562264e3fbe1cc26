// The engine (engine.h): rank 0's scheduler and sampler, every rank's forwards.
//
// Scheduling, each step, under --max-batch-tokens and --max-num-seqs:
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
// computed to lose. Its sampler keeps its state, so a preempted request gives the tokens it
// would have given unpreempted (up to the batch's arithmetic, see docs/engine.md).
//
// The descriptor, int64 throughout and of one length for the run (from the limits):
//   [0] 1: a step, 0: the run is over, 2: nothing to run yet (idle()); [1] tokens; [2] sequences; [3] unused
//   [4, 4 + T)  the tokens' ids (T = --max-batch-tokens)
//   then per sequence (S = --max-num-seqs): first, count, cached, sampled
//   then per sequence: its block table, B = ceil(--max-seq-len / block size) entries
#include "engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>

namespace tpcrt {

namespace {
constexpr size_t kHeader = 4, kPerSequence = 4;
} // namespace

/// Rank 0's view of one request while it runs.
struct Engine::Sequence {
  size_t handle = 0;
  std::vector<int64_t> tokens; // the prompt, then what it has generated
  int64_t computed = 0;        // tokens whose keys and values are in its blocks
  std::vector<int32_t> blocks;
  std::optional<Sampler> sampler;
};

/// A request rank 0 holds: what was asked and what came of it, its sequence, and when it
/// arrived.
struct Engine::Entry {
  EngineRequest request;
  Sequence sequence;
  std::chrono::steady_clock::time_point arrived;
};

Engine::Engine(const ModelSpec &spec, Backend &backend, const RankInfo &rank,
               EngineLimits limits)
    : spec(spec), backend(backend), rank(rank), limits(limits),
      blocksPerSequence((limits.maxSeqLen + limits.blockSize - 1) / limits.blockSize) {
  if (rank.rank == 0) {
    freeList.resize(size_t(limits.blocks));
    for (size_t b = 0; b < freeList.size(); ++b)
      freeList[b] = int32_t(limits.blocks - 1 - int64_t(b));
  }
}

Engine::~Engine() = default;

size_t Engine::descriptorLength() const {
  return kHeader + size_t(limits.maxBatchTokens) +
         size_t(limits.maxNumSeqs) * (kPerSequence + size_t(blocksPerSequence));
}

void Engine::share(std::vector<int64_t> &d) {
  if (rank.tp == 1 || !rank.comm)
    return;
  gathered.resize(d.size() * size_t(rank.tp));
  rank.comm->communicator().exchange(d.data(), d.size() * sizeof(int64_t), gathered.data());
  std::copy(gathered.begin(), gathered.begin() + ptrdiff_t(d.size()), d.begin());
}

void Engine::readDescriptor(const std::vector<int64_t> &d, std::vector<int64_t> &ids,
                            std::vector<int64_t> &positions, std::vector<int32_t> &tables,
                            Step &step) {
  int64_t tokens = d[1], sequences = d[2];
  if (tokens < 1 || tokens > limits.maxBatchTokens || sequences < 1 ||
      sequences > limits.maxNumSeqs)
    throw std::runtime_error("internal error: a step descriptor of " + std::to_string(tokens) +
                             " tokens in " + std::to_string(sequences) + " sequences");
  ids.assign(d.begin() + kHeader, d.begin() + ptrdiff_t(kHeader + size_t(tokens)));
  positions.resize(size_t(tokens));
  tables.resize(size_t(limits.maxNumSeqs * blocksPerSequence));
  const int64_t *perSequence = d.data() + kHeader + limits.maxBatchTokens;
  const int64_t *table = perSequence + limits.maxNumSeqs * int64_t(kPerSequence);
  step.sequences.clear();
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t *f = perSequence + s * int64_t(kPerSequence);
    StepSequence sequence;
    sequence.first = f[0];
    sequence.count = f[1];
    sequence.cached = f[2];
    sequence.sampled = f[3] != 0;
    int64_t used = (sequence.cached + sequence.count + limits.blockSize - 1) / limits.blockSize;
    if (sequence.first < 0 || sequence.count < 1 || sequence.first + sequence.count > tokens ||
        sequence.cached < 0 || used > blocksPerSequence)
      throw std::runtime_error("internal error: a step descriptor's sequence " +
                               std::to_string(s) + " is out of range");
    int32_t *mine = tables.data() + s * blocksPerSequence;
    for (int64_t b = 0; b < used; ++b) {
      int64_t block = table[s * blocksPerSequence + b];
      if (block < 0 || block >= limits.blocks)
        throw std::runtime_error("internal error: a step descriptor names KV block " +
                                 std::to_string(block));
      mine[b] = int32_t(block);
    }
    sequence.blocks = mine;
    for (int64_t i = 0; i < sequence.count; ++i)
      positions[size_t(sequence.first + i)] = sequence.cached + i;
    step.sequences.push_back(sequence);
  }
  step.ids = ids.data();
  step.positions = positions.data();
  step.tokens = tokens;
  step.argmax = d[3] != 0;
}

const float *Engine::forward(const Step &step, const EngineHooks &hooks) {
  if (hooks.beforeStep)
    hooks.beforeStep(stepCount);
  ++stepCount;
  // The program's sequence-parallel forward (tp.sequence_parallel) for one sequence's tokens
  // in the counts its rule gives.
  int64_t multiple = spec.sequenceParallelTokens;
  bool split = backend.hasSequenceParallel() && step.sequences.size() == 1 && multiple > 0 &&
               step.tokens >= multiple && step.tokens % multiple == 0;
  return backend.forward(step, split);
}

namespace {
double millisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

void Engine::follow(const EngineHooks &hooks) {
  std::vector<int64_t> d(descriptorLength()), ids, positions;
  std::vector<int32_t> tables;
  Step step;
  for (;;) {
    auto start = std::chrono::steady_clock::now();
    share(d);
    if (d[0] == 0)
      return;
    if (d[0] == 2)
      continue;
    readDescriptor(d, ids, positions, tables, step);
    forward(step, hooks);
    stepTimes.push_back(millisSince(start));
  }
}

size_t Engine::submit(EngineRequest request) {
  size_t handle = nextHandle++;
  Entry &e = entries[handle];
  e.arrived = std::chrono::steady_clock::now();
  e.request = std::move(request);
  e.sequence.handle = handle;
  e.sequence.tokens = e.request.prompt;
  e.sequence.sampler.emplace(e.request.sampling, e.request.prompt, spec.vocab);
  if (e.request.maxTokens > 0)
    waitingQueue.push_back(&e.sequence);
  else
    e.request.finishReason = "length";
  return handle;
}

EngineRequest &Engine::request(size_t handle) {
  auto it = entries.find(handle);
  if (it == entries.end())
    throw std::logic_error("internal error: no engine request " + std::to_string(handle));
  return it->second.request;
}

void Engine::forget(size_t handle) {
  auto it = entries.find(handle);
  if (it == entries.end())
    return;
  if (!it->second.request.finishReason)
    throw std::logic_error("internal error: engine request " + std::to_string(handle) +
                           " forgotten while it runs");
  entries.erase(it);
}

void Engine::release(Sequence *s) {
  freeList.insert(freeList.end(), s->blocks.rbegin(), s->blocks.rend());
  s->blocks.clear();
}

Engine::Sequence *Engine::preemptNewest() {
  Sequence *victim = runningList.back();
  runningList.pop_back();
  release(victim);
  victim->computed = 0; // recomputed from its prompt and output when readmitted
  ++entries.at(victim->handle).request.preempted;
  ++preemptionCount;
  waitingQueue.push_front(victim);
  return victim;
}

void Engine::abort(size_t handle) {
  auto it = entries.find(handle);
  if (it == entries.end() || it->second.request.finishReason)
    return;
  Sequence *s = &it->second.sequence;
  release(s);
  runningList.erase(std::remove(runningList.begin(), runningList.end(), s), runningList.end());
  waitingQueue.erase(std::remove(waitingQueue.begin(), waitingQueue.end(), s),
                     waitingQueue.end());
  it->second.request.finishReason = "abort";
  it->second.request.finishedMs = millisSince(it->second.arrived);
}

void Engine::stop() {
  std::vector<int64_t> d(descriptorLength(), 0); // kind 0: the end, for the peers
  share(d);
}

void Engine::idle() {
  std::vector<int64_t> d(descriptorLength(), 0);
  d[0] = 2;
  share(d);
}

void Engine::run(std::vector<EngineRequest> &requests, const EngineHooks &hooks) {
  if (rank.rank != 0)
    return follow(hooks);
  // The hooks name requests by their index here, handles counting from `first`.
  size_t first = nextHandle;
  for (EngineRequest &r : requests)
    submit(std::move(r));
  EngineHooks indexed = hooks;
  if (hooks.onToken)
    indexed.onToken = [&](size_t h, int64_t id) { return hooks.onToken(h - first, id); };
  if (hooks.onFinish)
    indexed.onFinish = [&](size_t h) {
      requests[h - first] = request(h); // its results, before the caller looks
      hooks.onFinish(h - first);
    };
  if (hooks.onLogits)
    indexed.onLogits = [&](size_t h, const float *row) { hooks.onLogits(h - first, row); };
  while (busy())
    step(indexed);
  stop();
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i] = std::move(request(first + i));
    forget(first + i);
  }
}

void Engine::step(const EngineHooks &hooks) {
  if (!busy())
    return;
  auto start = std::chrono::steady_clock::now();
  auto blocksFor = [&](int64_t tokens) {
    return (tokens + limits.blockSize - 1) / limits.blockSize;
  };
  auto grow = [&](Sequence *s, int64_t count) {
    while (int64_t(s->blocks.size()) < blocksFor(s->computed + count)) {
      s->blocks.push_back(freeList.back());
      freeList.pop_back();
    }
  };
  struct Planned {
    Sequence *sequence;
    int64_t count;
  };
  std::vector<Planned> plan;
  int64_t budget = limits.maxBatchTokens;
  int64_t preemptedBefore = preemptionCount;
  for (size_t i = 0; i < runningList.size() && budget > 0; ++i) {
    Sequence *s = runningList[i];
    int64_t count = std::min<int64_t>(int64_t(s->tokens.size()) - s->computed, budget);
    bool preemptedItself = false;
    while (blocksFor(s->computed + count) - int64_t(s->blocks.size()) >
           int64_t(freeList.size()))
      if (preemptNewest() == s) {
        preemptedItself = true;
        break;
      }
    if (preemptedItself)
      break; // it was the newest: nothing after it runs
    grow(s, count);
    plan.push_back({s, count});
    budget -= count;
  }
  // No admission in a step that had to preempt: the blocks are short already.
  while (preemptionCount == preemptedBefore && budget > 0 &&
         int64_t(runningList.size()) < limits.maxNumSeqs && !waitingQueue.empty()) {
    Sequence *s = waitingQueue.front();
    int64_t count = std::min<int64_t>(int64_t(s->tokens.size()) - s->computed, budget);
    if (blocksFor(count) > int64_t(freeList.size()))
      break;
    waitingQueue.pop_front();
    runningList.push_back(s);
    grow(s, count);
    plan.push_back({s, count});
    budget -= count;
  }
  if (plan.empty()) // cannot happen: a lone sequence always fits (--kv-cache-tokens)
    throw std::runtime_error("internal error: the scheduler found nothing to run");

  // The descriptor.
  std::vector<int64_t> &d = descriptor;
  d.assign(descriptorLength(), 0);
  d[0] = 1;
  int64_t tokens = 0;
  int64_t *perSequence = d.data() + kHeader + limits.maxBatchTokens;
  int64_t *table = perSequence + limits.maxNumSeqs * int64_t(kPerSequence);
  for (size_t p = 0; p < plan.size(); ++p) {
    Sequence *s = plan[p].sequence;
    int64_t *f = perSequence + int64_t(p) * int64_t(kPerSequence);
    f[0] = tokens;
    f[1] = plan[p].count;
    f[2] = s->computed;
    f[3] = s->computed + plan[p].count == int64_t(s->tokens.size());
    for (int64_t i = 0; i < plan[p].count; ++i)
      d[kHeader + size_t(tokens++)] = s->tokens[size_t(s->computed + i)];
    for (size_t b = 0; b < s->blocks.size(); ++b)
      table[int64_t(p) * blocksPerSequence + int64_t(b)] = s->blocks[b];
  }
  d[1] = tokens;
  d[2] = int64_t(plan.size());
  // Whether every row this step samples needs its argmax alone: then the program may find it
  // on the ranks and not gather the logits (Step::argmax).
  bool argmax = !hooks.onLogits;
  for (size_t p = 0; argmax && p < plan.size(); ++p) {
    Sequence *s = plan[p].sequence;
    if (s->computed + plan[p].count < int64_t(s->tokens.size()))
      continue; // not sampled this step
    const EngineRequest &r = entries.at(s->handle).request;
    argmax = r.sampling.greedy() && !r.sampling.penalized() && r.logprobs < 0;
  }
  d[3] = argmax;
  share(d);
  readDescriptor(d, stepIds, stepPositions, stepTables, current);
  const float *logits = forward(current, hooks);
  const int64_t *chosen = current.argmax ? backend.argmax() : nullptr;

  // Rank 0 samples the sequences whose known tokens are all computed now: their rows of
  // the logits, one each in the step's order (the last token's of every token where the
  // program has no tp.last_token).
  int64_t row = 0;
  for (size_t p = 0; p < plan.size(); ++p) {
    Sequence *s = plan[p].sequence;
    s->computed += plan[p].count;
    if (s->computed < int64_t(s->tokens.size()))
      continue; // a prompt's chunk, more to come
    Entry &e = entries.at(s->handle);
    EngineRequest &r = e.request;
    const StepSequence &mineInStep = current.sequences[p];
    int64_t at = spec.lastTokenOnly ? row++ : mineInStep.first + mineInStep.count - 1;
    int64_t token;
    if (chosen) { // the argmax found on the ranks: no row of logits came
      token = chosen[at];
      s->sampler->record(token);
    } else {
      const float *mine = logits + at * spec.vocab;
      if (hooks.onLogits)
        hooks.onLogits(s->handle, mine);
      token = s->sampler->sample(mine);
      if (r.logprobs >= 0)
        r.outputLogprobs.push_back(logprobsOf(mine, spec.vocab, token, r.logprobs));
    }
    r.output.push_back(token);
    if (r.output.size() == 1)
      r.firstTokenMs = millisSince(e.arrived);
    bool stopString = hooks.onToken && hooks.onToken(s->handle, token);
    bool stopId = std::find(r.stopIds.begin(), r.stopIds.end(), token) != r.stopIds.end();
    if (!r.forced.empty()) // teacher forcing: the length alone ends it
      stopString = stopId = false;
    if (stopString || stopId || int64_t(r.output.size()) >= r.maxTokens) {
      r.finishReason = stopString || stopId ? "stop" : "length";
      r.finishedMs = millisSince(e.arrived);
      release(s);
      runningList.erase(std::find(runningList.begin(), runningList.end(), s));
      if (hooks.onFinish)
        hooks.onFinish(s->handle);
    } else {
      s->tokens.push_back(r.forced.empty() ? token : r.forced[r.output.size() - 1]);
    }
  }
  stepTimes.push_back(millisSince(start));
}

} // namespace tpcrt
