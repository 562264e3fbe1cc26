// The engine core (engine.h): the loop every rank runs, rank 0's request bookkeeping and its
// sampling. What a step holds is the scheduler's (scheduler.cpp); how it travels is the
// codec's (step_codec.cpp).
#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace tpcrt {

/// A request rank 0 holds: what was asked and what came of it, its sequence, its sampler,
/// and when it arrived.
struct Engine::Entry {
  EngineRequest request;
  Sequence sequence;
  std::optional<Sampler> sampler;
  std::chrono::steady_clock::time_point arrived;
  std::vector<size_t> followers; // submitted after it, queued once its prompt is computed
};

namespace {

double millisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

StepLayout layoutOf(const EngineLimits &limits) {
  StepLayout layout;
  layout.maxTokens = limits.maxBatchTokens;
  layout.maxSequences = limits.maxNumSeqs;
  layout.blocksPerSequence = limits.blocksFor(limits.maxSeqLen);
  layout.blockSize = limits.blockSize;
  layout.blocks = limits.blocks;
  for (size_t w = 0; w < limits.windows(); ++w)
    layout.windowReaches.push_back(limits.windowReach(w));
  layout.windowBlocks = limits.windowBlocks;
  return layout;
}

} // namespace

const float *Backend::receiveLogits(int64_t, int64_t, int64_t, const char *) {
  throw std::logic_error("internal error: this backend runs no pipeline stages");
}

Engine::Engine(const ModelSpec &spec, Backend &backend, const RankInfo &rank,
               EngineLimits flags)
    : spec(spec), backend(backend), rank(rank), can(backend.capabilities()),
      limits(flags), codec(layoutOf(limits)), scheduler(limits),
      pipelined(rank.stages > 1 && can.pipelined) {}

Engine::~Engine() = default;

void Engine::share(std::vector<int64_t> &d) {
  // Every rank of the group runs the step rank 0 decided; with pipeline stages, every rank of
  // the first stage, each passing it on to the next stage (passOn).
  if (rank.tp == 1 || !rank.comm)
    return;
  gathered.resize(d.size() * size_t(rank.tp));
  rank.comm->communicator().exchange(d.data(), d.size() * sizeof(int64_t), gathered.data());
  std::copy(gathered.begin(), gathered.begin() + ptrdiff_t(d.size()), d.begin());
}

void Engine::passOn(const std::vector<int64_t> &d) {
  if (rank.stage + 1 >= rank.stages)
    return;
  rank.world->communicator().sendControl(d.data(), d.size() * sizeof(int64_t),
                                         (rank.stage + 1) * rank.tp + rank.rank);
}

Engine::Collected Engine::receiveLogits(int64_t rows, bool ids) {
  if (!ids)
    return {backend.receiveLogits(rows, spec.vocab, spec.logitsStage, spec.logitsModule),
            nullptr};
  // An argmax step's: each row's id as an fp32 value (sendLogitsToStage), exact below 2^24.
  const float *sent = backend.receiveLogits(rows, 1, spec.logitsStage, spec.logitsModule);
  receivedIds.resize(size_t(rows));
  for (int64_t row = 0; row < rows; ++row) {
    float id = sent[row];
    if (!(id == std::floor(id) && (id == -2 || id >= 0) && id < float(spec.vocab)))
      throw std::runtime_error("the last pipeline stage sent " + std::to_string(id) +
                               " as row " + std::to_string(row) +
                               "'s argmax, which is no token id of the " +
                               std::to_string(spec.vocab) + " of the vocabulary");
    receivedIds[size_t(row)] = int64_t(id);
  }
  return {nullptr, receivedIds.data()};
}

Engine::Collected Engine::runFirstStage(const std::vector<int64_t> &d, const EngineHooks &hooks,
                                        const std::function<void(const Collected &)> &before) {
  StepCollect c = codec.collect(d);
  if (pipelined)
    backend.holdTransfers();
  passOn(d);
  codec.decode(d, current);
  forward(current.step, hooks);
  // An earlier step's logits before this step's sends go: the last stage sends them before
  // it can take this step's.
  Collected early = c.before >= 0 ? receiveLogits(c.before, c.beforeIds) : Collected{};
  if (pipelined)
    backend.releaseTransfers();
  if (c.before >= 0)
    before(early);
  return c.after >= 0 ? receiveLogits(c.after, c.afterIds) : Collected{};
}

void Engine::followStage(const EngineHooks &hooks) {
  std::vector<int64_t> d(codec.length());
  int from = (rank.stage - 1) * rank.tp + rank.rank;
  for (;;) {
    auto start = std::chrono::steady_clock::now();
    rank.world->communicator().recvControl(d.data(), d.size() * sizeof(int64_t), from);
    StepKind kind = codec.kind(d);
    if (kind == StepKind::End || kind == StepKind::Idle) {
      passOn(d);
      if (kind == StepKind::End)
        return;
      continue;
    }
    if (kind != StepKind::Run) // Collect stays in the first stage
      throw std::runtime_error("internal error: pipeline stage " + std::to_string(rank.stage) +
                               " was passed a step descriptor of kind " +
                               std::to_string(int64_t(kind)));
    // Its sends after its forward, as the first stage's: it receives before it sends.
    if (pipelined)
      backend.holdTransfers();
    passOn(d);
    codec.decode(d, current);
    forward(current.step, hooks);
    if (pipelined)
      backend.releaseTransfers();
    stepTimes.push_back(millisSince(start));
  }
}

const float *Engine::forward(const Step &step, const EngineHooks &hooks) {
  if (hooks.beforeStep)
    hooks.beforeStep(stepCount);
  ++stepCount;
  // The program's sequence-parallel forward (tp.sequence_parallel) for one sequence's tokens
  // in the counts its rule gives.
  int64_t multiple = spec.sequenceParallelTokens;
  // (Not a step that scores a prompt: that forward's tp.last_token takes its rank's rows.)
  bool split = backend.hasSequenceParallel() && step.sequences.size() == 1 &&
               step.sequences.front().logits <= 1 && multiple > 0 && step.tokens >= multiple &&
               step.tokens % multiple == 0;
  return backend.forward(step, split);
}

void Engine::follow(const EngineHooks &hooks) {
  if (rank.stage > 0)
    return followStage(hooks);
  std::vector<int64_t> d(codec.length());
  for (;;) {
    auto start = std::chrono::steady_clock::now();
    share(d);
    StepKind kind = codec.kind(d);
    if (kind == StepKind::End || kind == StepKind::Idle) {
      passOn(d);
      if (kind == StepKind::End)
        return;
      continue;
    }
    if (kind == StepKind::Collect) {
      StepCollect c = codec.collect(d);
      receiveLogits(c.before, c.beforeIds);
      continue;
    }
    if (rank.stages > 1) {
      runFirstStage(d, hooks, [](const Collected &) {});
    } else {
      codec.decode(d, current);
      forward(current.step, hooks);
    }
    stepTimes.push_back(millisSince(start));
  }
}

size_t Engine::submitAfter(EngineRequest request, size_t leader) {
  auto found = entries.find(leader);
  if (found == entries.end() || found->second.request.finishReason ||
      !found->second.request.output.empty())
    return submit(std::move(request));
  size_t handle = enter(std::move(request), /*queue=*/false);
  if (!entries.at(handle).request.finishReason) // (not refused at submit)
    found->second.followers.push_back(handle);
  return handle;
}

void Engine::releaseFollowers(Entry &e) {
  for (size_t handle : std::exchange(e.followers, {})) {
    auto it = entries.find(handle);
    if (it != entries.end() && !it->second.request.finishReason) // (not aborted meanwhile)
      scheduler.add(&it->second.sequence);
  }
}

size_t Engine::submit(EngineRequest request) { return enter(std::move(request), true); }

size_t Engine::enter(EngineRequest request, bool queue) {
  size_t handle = nextHandle++;
  Entry &e = entries[handle];
  e.arrived = std::chrono::steady_clock::now();
  e.request = std::move(request);
  e.sequence.handle = handle;
  e.sequence.tokens = e.request.prompt;
  e.sequence.salt = e.request.cacheSalt;
  if (e.request.promptLogprobs >= 0) // every prompt token's but the first (its row before it)
    e.sequence.scoreTo = int64_t(e.request.prompt.size()) - 1;
  e.sampler.emplace(e.request.sampling, e.request.prompt, spec.vocab, e.request.stopIds);
  int64_t prompt = int64_t(e.request.prompt.size()), most = e.request.maxTokens;
  if (most < 0 || !fitsContext(prompt, most, limits.maxSeqLen)) {
    // What the readers of requests refuse first; here so that no caller can make a sequence
    // outgrow its block table.
    e.request.finishReason = "error";
    e.request.error = "the prompt's " + std::to_string(prompt) + " tokens and max_tokens " +
                      std::to_string(most) + " need more than --max-model-len " +
                      std::to_string(limits.maxSeqLen) + " tokens";
  } else if (most > 0 || e.request.promptLogprobs >= 0) { // a prompt to score, maybe alone
    if (queue)
      scheduler.add(&e.sequence);
  } else {
    e.request.finishReason = "length";
  }
  return handle;
}

EngineRequest &Engine::request(size_t handle) {
  auto it = entries.find(handle);
  if (it == entries.end())
    throw std::logic_error("internal error: no engine request " + std::to_string(handle));
  it->second.request.preempted = it->second.sequence.preempted;
  it->second.request.cachedTokens = it->second.sequence.cachedTokens;
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

void Engine::abort(size_t handle) {
  auto it = entries.find(handle);
  if (it == entries.end() || it->second.request.finishReason)
    return;
  scheduler.remove(&it->second.sequence);
  it->second.request.finishReason = "abort";
  it->second.request.finishedMs = millisSince(it->second.arrived);
  releaseFollowers(it->second);
}

void Engine::stop() {
  while (!inFlight.empty()) { // logits still to come (nothing calls step() after an error)
    codec.encodeSignal(StepKind::Collect, descriptor,
                       {inFlight.front().logitsRows, -1, inFlight.front().argmax});
    share(descriptor);
    collectOldest({});
  }
  codec.encodeSignal(StepKind::End, descriptor);
  share(descriptor);
  passOn(descriptor);
}

void Engine::idle() {
  codec.encodeSignal(StepKind::Idle, descriptor);
  share(descriptor);
  passOn(descriptor);
}

std::chrono::milliseconds Engine::heartbeat() const {
  return std::chrono::milliseconds(std::min<int64_t>(1000, int64_t(rank.timeoutSeconds) * 300));
}

void Engine::run(std::vector<EngineRequest> &requests, const EngineHooks &hooks) {
  if (rank.worldRank() != 0)
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

bool Engine::argmaxOnly(const std::vector<Scheduled> &plan, const EngineHooks &hooks,
                        bool draws) {
  if (!can.argmax || hooks.onLogits)
    return false;
  for (const Scheduled &s : plan) {
    if (s.sequence->scoring())
      return false; // its prompt's rows are scored
    if (!s.sampled())
      continue;
    const Entry &e = entries.at(s.sequence->handle);
    if (!(draws ? e.sampler->plain() : e.sampler->argmaxOfRaw()) || e.request.logprobs >= 0 ||
        e.request.constraint)
      return false;
  }
  return true;
}

std::vector<Engine::StepRow> Engine::rowsOf(const std::vector<Scheduled> &plan) const {
  std::vector<StepRow> rows;
  int64_t first = 0; // as the codec lays the step's tokens out
  for (const Scheduled &s : plan) {
    rows.push_back({s.sequence->handle, s.sampled(), first, s.count, s.sequence->computed,
                    s.logitsRows()});
    first += s.count;
  }
  return rows;
}

int64_t Engine::logitsRowsOf(const std::vector<Scheduled> &plan) const {
  if (!spec.lastTokenOnly) { // every token's row
    int64_t tokens = 0;
    for (const Scheduled &s : plan)
      tokens += s.count;
    return tokens;
  }
  // tp.last_token's rows (lastRows): each sequence's logitsRows(), and one where none has any.
  int64_t rows = 0;
  for (const Scheduled &s : plan)
    rows += s.logitsRows();
  return std::max<int64_t>(1, rows);
}

void Engine::step(const EngineHooks &hooks) {
  if (!busy())
    return;
  if (rank.stages > 1)
    return stepStaged(hooks);
  auto start = std::chrono::steady_clock::now();
  std::vector<Scheduled> plan = scheduler.schedule();
  planned.clear();
  bool picked = argmaxOnly(plan, hooks, can.draws);
  for (const Scheduled &s : plan) {
    planned.push_back({s.sequence->tokens.data() + s.sequence->computed, s.count,
                       s.sequence->computed, s.logitsRows(), &s.sequence->blocks,
                       &s.sequence->windowBlocks});
    // The backend picks its token: the uniform number is drawn here, on rank 0, in the order
    // the sampler would draw it, and sent with the step.
    if (picked && s.sampled())
      planned.back().draw = entries.at(s.sequence->handle).sampler->draw();
  }
  codec.encode(planned, picked, {}, descriptor);
  share(descriptor);
  codec.decode(descriptor, current);
  const float *logits = forward(current.step, hooks);
  std::vector<StepRow> rows = rowsOf(plan);
  scheduler.computed(plan);
  const int64_t *chosen = current.step.argmax ? backend.argmax() : nullptr;
  if (current.step.argmax && !chosen) // it said it could (capabilities().argmax)
    throw std::logic_error("the backend was asked for each row's argmax, which it says it "
                           "finds, and gave none");
  sample(rows, logits, chosen, hooks);
  stepTimes.push_back(millisSince(start));
}

void Engine::stepStaged(const EngineHooks &hooks) {
  auto start = std::chrono::steady_clock::now();
  // Pipelined, a step takes its share of the live sequences, so that each stage has a step
  // of about as many.
  int64_t most = 0;
  if (pipelined) {
    int64_t live = std::min<int64_t>(
        int64_t(scheduler.running().size() + scheduler.waiting().size()), limits.maxNumSeqs);
    most = std::max<int64_t>(1, (live + rank.stages - 1) / rank.stages);
  }
  std::vector<Scheduled> plan = scheduler.schedule(most);
  if (plan.empty()) { // every sequence that could run waits for a step in flight
    codec.encodeSignal(StepKind::Collect, descriptor,
                       {inFlight.front().logitsRows, -1, inFlight.front().argmax});
    share(descriptor);
    collectOldest(hooks);
    return;
  }
  planned.clear();
  for (const Scheduled &s : plan) {
    planned.push_back({s.sequence->tokens.data() + s.sequence->computed, s.count,
                       s.sequence->computed, s.logitsRows(), &s.sequence->blocks,
                       &s.sequence->windowBlocks});
    s.sequence->inFlight = true;
  }
  StepCollect collect;
  // The last stage sends the oldest step's logits before it takes this step: received here
  // before this step's sends go.
  if (pipelined && int64_t(inFlight.size()) >= rank.stages - 1) {
    collect.before = inFlight.front().logitsRows;
    collect.beforeIds = inFlight.front().argmax;
  }
  // A greedy step's argmax found on the last stage, which sends one id a row back, where the
  // program's transfer of the logits is marked for it (argmaxOnRanks: the CPU's; the CUDA
  // program sends the rows, and finds no argmax of its own in a staged step).
  bool argmax = spec.argmaxOnRanks && argmaxOnly(plan, hooks, false);
  InFlight mine{rowsOf(plan), logitsRowsOf(plan), argmax, start};
  if (!pipelined) {
    collect.after = mine.logitsRows;
    collect.afterIds = mine.argmax;
  }
  codec.encode(planned, mine.argmax, collect, descriptor);
  share(descriptor);
  scheduler.computed(plan);
  Collected own = runFirstStage(descriptor, hooks, [&](const Collected &collected) {
    InFlight oldest = std::move(inFlight.front());
    inFlight.pop_front();
    finish(oldest, collected, hooks);
  });
  if (pipelined)
    inFlight.push_back(std::move(mine));
  else
    finish(mine, own, hooks);
}

void Engine::collectOldest(const EngineHooks &hooks) {
  InFlight oldest = std::move(inFlight.front());
  inFlight.pop_front();
  finish(oldest, receiveLogits(oldest.logitsRows, oldest.argmax), hooks);
}

void Engine::finish(const InFlight &step, const Collected &collected,
                    const EngineHooks &hooks) {
  sample(step.rows, collected.logits, collected.chosen, hooks);
  // From its schedule to its logits: through every stage, and what it waited for on the way.
  stepTimes.push_back(millisSince(step.start));
}

void Engine::sample(const std::vector<StepRow> &rows, const float *logits,
                    const int64_t *chosen, const EngineHooks &hooks) {
  // Each sequence's rows of the logits are its last StepRow::logits tokens', in the step's
  // order (every token's row where the program has no tp.last_token): those that score its
  // prompt, then, where its known tokens are all computed now, the row its next token is
  // sampled from.
  int64_t row = 0;
  for (const StepRow &step : rows) {
    auto found = entries.find(step.handle);
    if (found != entries.end())
      found->second.sequence.inFlight = false;
    int64_t base = spec.lastTokenOnly ? row : step.first + step.count - step.logits;
    row += step.logits;
    if (found == entries.end() || found->second.request.finishReason)
      continue; // ended while its step was in flight (a client that went away)
    Entry &e = found->second;
    Sequence *s = &e.sequence;
    EngineRequest &r = e.request;
    auto finiteRow = [&](const float *x) {
      return std::all_of(x, x + spec.vocab, [](float v) { return std::isfinite(v); });
    };
    // Position p's row scores prompt token p + 1 (once: a recomputed row is passed over).
    bool failed = false;
    for (int64_t i = 0; i < step.logits; ++i) {
      int64_t p = step.start + step.count - step.logits + i;
      if (p != s->scoreFrom || p >= s->scoreTo)
        continue;
      const float *scored = logits + (base + i) * spec.vocab;
      if (!finiteRow(scored)) {
        fail(s, "the model's logits are not finite (NaN or infinite) for its prompt's token " +
                    std::to_string(p + 2), hooks);
        failed = true;
        break;
      }
      r.promptTokenLogprobs.push_back(
          logprobsOf(scored, spec.vocab, s->tokens[size_t(p + 1)], r.promptLogprobs));
      ++s->scoreFrom;
    }
    if (failed || !step.sampled)
      continue; // a prompt's chunk, more to come
    releaseFollowers(e); // its prompt is in the cache now
    if (r.maxTokens == 0) { // a prompt scored, nothing to generate
      end(e, "length", hooks);
      continue;
    }
    int64_t at = base + step.logits - 1;
    const float *mine = chosen ? nullptr : logits + at * spec.vocab;
    // A logit that is not finite, seen by a rank (a negative argmax) or here in the row.
    bool finite = chosen ? chosen[at] >= 0 : finiteRow(mine);
    if (!finite) {
      fail(s, "the model's logits are not finite (NaN or infinite) for its token " +
                  std::to_string(r.output.size() + 1), hooks);
      continue;
    }
    int64_t token;
    if (chosen) { // the argmax found on the ranks: no row of logits came
      token = chosen[at];
      e.sampler->record(token);
    } else {
      if (hooks.onLogits)
        hooks.onLogits(s->handle, mine);
      // A constraint's tokens alone may be chosen: the others' logits -inf, in a copy (the
      // logprobs stay the raw distribution's).
      const float *from = mine;
      if (r.constraint) {
        allowed.assign(size_t((spec.vocab + 31) / 32), 0);
        if (!r.constraint->next(allowed)) {
          fail(s, "its grammar allows no token after token " + std::to_string(r.output.size()),
               hooks);
          continue;
        }
        masked.assign(mine, mine + spec.vocab);
        for (int64_t t = 0; t < spec.vocab; ++t)
          if (!(allowed[size_t(t / 32)] >> (t % 32) & 1))
            masked[size_t(t)] = -INFINITY;
        from = masked.data();
      }
      token = e.sampler->sample(from);
      if (r.constraint && !r.constraint->accept(token)) {
        fail(s, "its grammar refused token " + std::to_string(token) + " (where min_tokens or "
                "logit_bias rule out every token the grammar allows)", hooks);
        continue;
      }
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
    if (stopString || stopId || int64_t(r.output.size()) >= r.maxTokens)
      end(e, stopString || stopId ? "stop" : "length", hooks);
    else
      s->tokens.push_back(r.forced.empty() ? token : r.forced[r.output.size() - 1]);
  }
}

void Engine::fail(Sequence *s, const std::string &why, const EngineHooks &hooks) {
  Entry &e = entries.at(s->handle);
  e.request.error = why;
  end(e, "error", hooks);
}

void Engine::end(Entry &e, const char *reason, const EngineHooks &hooks) {
  releaseFollowers(e); // (those left: its prompt ended without a token chosen)
  e.request.finishReason = reason;
  e.request.finishedMs = millisSince(e.arrived);
  scheduler.finish(&e.sequence);
  if (hooks.onFinish)
    hooks.onFinish(e.sequence.handle);
}

} // namespace tpcrt
