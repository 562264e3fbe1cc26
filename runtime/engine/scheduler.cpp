// The scheduler's policy (scheduler.h).
#include "scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tpcrt {

void Scheduler::grow(Sequence *s, int64_t count) {
  // A block table has room for --max-model-len's blocks and no more (the step descriptor's
  // slot): the engine refuses at submit a request that could outgrow it, so this guards a
  // caller's mistake, before anything is written past the slot.
  if (s->computed + count > limits.maxSeqLen)
    throw std::logic_error("internal error: sequence " + std::to_string(s->handle) + " would "
                           "hold " + std::to_string(s->computed + count) +
                           " tokens, more than --max-model-len " +
                           std::to_string(limits.maxSeqLen));
  while (int64_t(s->blocks.size()) < limits.blocksFor(s->computed + count))
    s->blocks.push_back(pool.allocate());
}

Sequence *Scheduler::newestNotInFlight() const {
  auto newest = std::find_if(runningList.rbegin(), runningList.rend(),
                             [](const Sequence *s) { return !s->inFlight; });
  return newest == runningList.rend() ? nullptr : *newest;
}

Sequence *Scheduler::preemptNewest() {
  Sequence *victim = newestNotInFlight();
  if (!victim)
    return nullptr;
  runningList.erase(std::find(runningList.begin(), runningList.end(), victim));
  pool.releaseAll(victim->blocks);
  victim->computed = 0; // recomputed from its prompt and output when readmitted
  victim->chained = 0;
  victim->chainParent = -1;
  ++victim->preempted;
  ++preemptionCount;
  waitingQueue.push_front(victim);
  return victim;
}

std::vector<int32_t> Scheduler::cachedPrefix(const Sequence &s) const {
  std::vector<int32_t> found;
  if (!limits.prefixCaching || s.scoring()) // the rows it scores are computed
    return found;
  int64_t most = (int64_t(s.tokens.size()) - 1) / limits.blockSize;
  int32_t parent = -1;
  for (int64_t i = 0; i < most; ++i) {
    std::optional<int32_t> block =
        pool.find(parent, s.tokens.data() + i * limits.blockSize, limits.blockSize, s.salt);
    if (!block)
      break;
    found.push_back(parent = *block);
  }
  return found;
}

int64_t Scheduler::clipScored(const Sequence &s, int64_t count) const {
  int64_t from = std::max(s.computed, s.scoreFrom); // its first scored row this step
  if (!s.scoring() || from >= s.computed + count)
    return count;
  return std::min(count, from - s.computed + std::max<int64_t>(1, limits.scoredRows));
}

void Scheduler::admit(std::vector<Scheduled> &plan, int64_t &budget, int64_t most) {
  while (budget > 0 && int64_t(runningList.size()) < limits.maxNumSeqs &&
         int64_t(plan.size()) < most && !waitingQueue.empty()) {
    Sequence *s = waitingQueue.front();
    std::vector<int32_t> found = cachedPrefix(*s);
    int64_t start = int64_t(found.size()) * limits.blockSize;
    int64_t count = clipScored(*s, std::min(int64_t(s->tokens.size()) - start, budget));
    // The blocks it takes: new ones for what it computes, and the cached ones nobody holds,
    // which available() counts as room too.
    int64_t idle = std::count_if(found.begin(), found.end(),
                                 [&](int32_t b) { return pool.holdersOf(b) == 0; });
    if (limits.blocksFor(start + count) - int64_t(found.size()) + idle > pool.available())
      break;
    waitingQueue.pop_front();
    runningList.push_back(s);
    for (int32_t b : found) // held before grow() allocates, which could evict them
      pool.hold(b);
    s->blocks = found;
    s->computed = start;
    s->chained = int64_t(found.size());
    s->chainParent = found.empty() ? -1 : found.back();
    s->chainGeneration = found.empty() ? 0 : pool.generationOf(found.back());
    if (limits.prefixCaching && !s->scoring()) { // (one that scores looks nothing up)
      queriedTokens += int64_t(s->tokens.size());
      hitTokens += start;
    }
    if (s->preempted == 0)
      s->cachedTokens = start;
    grow(s, count);
    plan.push_back({s, count});
    budget -= count;
  }
}

std::vector<Scheduled> Scheduler::schedule(int64_t most) {
  std::vector<Scheduled> plan;
  if (!busy())
    return plan;
  if (most <= 0)
    most = limits.maxNumSeqs;
  int64_t budget = limits.maxBatchTokens;
  int64_t preemptedBefore = preemptionCount;
  bool starved = false; // a running sequence waits for blocks a newer one in flight holds
  for (size_t i = 0; i < runningList.size() && budget > 0 && int64_t(plan.size()) < most;
       ++i) {
    Sequence *s = runningList[i];
    if (s->inFlight)
      continue;
    int64_t count = clipScored(*s, std::min(s->pending(), budget));
    // The victims are the newest not in flight, s itself at the latest. But where s is the
    // newest not in flight only because newer ones are in flight, it waits for their logits
    // instead, admitting nobody meanwhile, and takes the blocks of the newest of them when it
    // is back: preempting itself there would let the newer sequence take its room, the two
    // taking turns to be preempted with neither finishing.
    bool preemptedItself = false;
    while (limits.blocksFor(s->computed + count) - int64_t(s->blocks.size()) >
           pool.available()) {
      if (newestNotInFlight() == s &&
          std::any_of(runningList.begin() + ptrdiff_t(i) + 1, runningList.end(),
                      [](const Sequence *newer) { return newer->inFlight; })) {
        starved = true;
        break;
      }
      if (preemptNewest() == s) {
        preemptedItself = true;
        break;
      }
    }
    if (preemptedItself || starved)
      break; // it was the newest not in flight: nothing after it runs
    grow(s, count);
    plan.push_back({s, count});
    budget -= count;
  }
  if (preemptionCount == preemptedBefore && !starved)
    admit(plan, budget, most);
  bool anyInFlight = std::any_of(runningList.begin(), runningList.end(),
                                 [](const Sequence *s) { return s->inFlight; });
  // Without a step in flight this cannot happen: a lone sequence always fits
  // (--kv-cache-tokens).
  if (plan.empty() && !anyInFlight)
    throw std::logic_error("internal error: the scheduler found nothing to run");
  return plan;
}

void Scheduler::publish(Sequence &s) {
  int64_t size = limits.blockSize;
  while (limits.prefixCaching && (s.chained + 1) * size <= s.computed &&
         s.chained < int64_t(s.blocks.size())) {
    int32_t holder = pool.publish(s.blocks[size_t(s.chained)], s.chainParent, s.chainGeneration,
                                  s.tokens.data() + s.chained * size, size, s.salt);
    s.chainParent = holder;
    s.chainGeneration = pool.generationOf(holder);
    ++s.chained;
  }
}

void Scheduler::computed(const std::vector<Scheduled> &step) {
  for (const Scheduled &s : step) {
    s.sequence->computed += s.count;
    publish(*s.sequence);
  }
}

void Scheduler::finish(Sequence *s) {
  s->inFlight = false;
  pool.releaseAll(s->blocks);
  runningList.erase(std::find(runningList.begin(), runningList.end(), s));
}

void Scheduler::remove(Sequence *s) {
  s->inFlight = false;
  pool.releaseAll(s->blocks);
  runningList.erase(std::remove(runningList.begin(), runningList.end(), s), runningList.end());
  waitingQueue.erase(std::remove(waitingQueue.begin(), waitingQueue.end(), s),
                     waitingQueue.end());
}

} // namespace tpcrt
