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

Sequence *Scheduler::preemptNewest() {
  auto newest = std::find_if(runningList.rbegin(), runningList.rend(),
                             [](const Sequence *s) { return !s->inFlight; });
  if (newest == runningList.rend())
    return nullptr;
  Sequence *victim = *newest;
  runningList.erase(std::next(newest).base());
  pool.releaseAll(victim->blocks);
  victim->computed = 0; // recomputed from its prompt and output when readmitted
  ++victim->preempted;
  ++preemptionCount;
  waitingQueue.push_front(victim);
  return victim;
}

void Scheduler::admit(std::vector<Scheduled> &plan, int64_t &budget, int64_t most) {
  while (budget > 0 && int64_t(runningList.size()) < limits.maxNumSeqs &&
         int64_t(plan.size()) < most && !waitingQueue.empty()) {
    Sequence *s = waitingQueue.front();
    int64_t count = std::min(s->pending(), budget);
    if (limits.blocksFor(count) > pool.available())
      break;
    waitingQueue.pop_front();
    runningList.push_back(s);
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
  for (size_t i = 0; i < runningList.size() && budget > 0 && int64_t(plan.size()) < most;
       ++i) {
    Sequence *s = runningList[i];
    if (s->inFlight)
      continue;
    int64_t count = std::min(s->pending(), budget);
    // The victims are the newest not in flight, s itself at the latest.
    bool preemptedItself = false;
    while (limits.blocksFor(s->computed + count) - int64_t(s->blocks.size()) >
           pool.available())
      if (preemptNewest() == s) {
        preemptedItself = true;
        break;
      }
    if (preemptedItself)
      break; // it was the newest not in flight: nothing after it runs
    grow(s, count);
    plan.push_back({s, count});
    budget -= count;
  }
  if (preemptionCount == preemptedBefore)
    admit(plan, budget, most);
  bool anyInFlight = std::any_of(runningList.begin(), runningList.end(),
                                 [](const Sequence *s) { return s->inFlight; });
  // Without a step in flight this cannot happen: a lone sequence always fits
  // (--kv-cache-tokens).
  if (plan.empty() && !anyInFlight)
    throw std::logic_error("internal error: the scheduler found nothing to run");
  return plan;
}

void Scheduler::computed(const std::vector<Scheduled> &step) {
  for (const Scheduled &s : step)
    s.sequence->computed += s.count;
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
