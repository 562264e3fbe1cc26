// The scheduler's policy (scheduler.h).
#include "scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tpcrt {

Scheduler::Scheduler(const EngineLimits &limits) : limits(limits), pool(limits.blocks) {
  for (int64_t blocks : limits.windowBlocks)
    windowPools.emplace_back(blocks);
}

bool Scheduler::fits(const Sequence &s, int64_t count) const {
  int64_t want = limits.blocksFor(s.computed + count);
  if (want - int64_t(s.blocks.size()) > pool.available())
    return false;
  for (size_t w = 0; w < windowPools.size(); ++w)
    if (want - int64_t(s.windowBlocks[w].size()) > windowPools[w].available())
      return false;
  return true;
}

namespace {
/// The blocks of `table` that `from` holds cached and nobody holds: a sequence that takes them
/// takes room available() counts.
int64_t idle(const BlockPool &from, const std::vector<int32_t> &table) {
  return int64_t(std::count_if(table.begin(), table.end(), [&](int32_t b) {
    return b >= 0 && from.holdersOf(b) == 0;
  }));
}
} // namespace

int64_t Scheduler::clipWindows(const std::vector<std::vector<int32_t>> &tables, int64_t start,
                               int64_t count) const {
  for (size_t w = 0; w < windowPools.size(); ++w) {
    // The tokens the table's blocks and the pool's room hold past `start`.
    const std::vector<int32_t> &table = tables[w];
    int64_t blocks =
        int64_t(table.size()) + windowPools[w].available() - idle(windowPools[w], table);
    count = std::min(count, std::max<int64_t>(1, blocks * limits.blockSize - start));
  }
  return count;
}

void Scheduler::dropUnread(Sequence &s) {
  for (size_t w = 0; w < windowPools.size(); ++w) {
    std::vector<int32_t> &table = s.windowBlocks[w];
    int64_t unread = std::min<int64_t>(
        int64_t(table.size()), limits.windowReach(w).firstRead(s.computed) / limits.blockSize);
    for (int64_t b = 0; b < unread; ++b)
      if (table[size_t(b)] >= 0) {
        windowPools[w].release(table[size_t(b)]);
        table[size_t(b)] = -1;
      }
  }
}

void Scheduler::releaseBlocks(Sequence &s) {
  pool.releaseAll(s.blocks);
  for (size_t w = 0; w < s.windowBlocks.size(); ++w) { // last first, as releaseAll
    std::vector<int32_t> &table = s.windowBlocks[w];
    for (auto b = table.rbegin(); b != table.rend(); ++b)
      if (*b >= 0)
        windowPools[w].release(*b);
    table.clear();
  }
}

void Scheduler::grow(Sequence *s, int64_t count) {
  // A block table has room for --max-model-len's blocks and no more (the step descriptor's
  // slot): the engine refuses at submit a request that could outgrow it, so this guards a
  // caller's mistake, before anything is written past the slot.
  if (s->computed + count > limits.maxSeqLen)
    throw std::logic_error("internal error: sequence " + std::to_string(s->handle) + " would "
                           "hold " + std::to_string(s->computed + count) +
                           " tokens, more than --max-model-len " +
                           std::to_string(limits.maxSeqLen));
  size_t want = size_t(limits.blocksFor(s->computed + count));
  while (s->blocks.size() < want)
    s->blocks.push_back(pool.allocate());
  s->windowBlocks.resize(windowPools.size());
  for (size_t w = 0; w < windowPools.size(); ++w)
    while (s->windowBlocks[w].size() < want)
      s->windowBlocks[w].push_back(windowPools[w].allocate());
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
  releaseBlocks(*victim);
  victim->computed = 0; // recomputed from its prompt and output when readmitted
  victim->chained = 0;
  victim->chainParent = -1;
  ++victim->preempted;
  ++preemptionCount;
  waitingQueue.push_front(victim);
  return victim;
}

std::vector<int32_t> Scheduler::cachedPrefix(const Sequence &s,
                                             std::vector<std::vector<int32_t>> &windowed) const {
  std::vector<int32_t> found;
  windowed.assign(windowPools.size(), {});
  if (!limits.prefixCaching || s.scoring()) // the rows it scores are computed
    return found;
  int64_t size = limits.blockSize, most = (int64_t(s.tokens.size()) - 1) / size;
  int32_t parent = -1;
  for (int64_t i = 0; i < most; ++i) {
    std::optional<int32_t> block = pool.find(parent, s.tokens.data() + i * size, size, s.salt);
    if (!block)
      break;
    found.push_back(parent = *block);
  }
  // The longest of those prefixes whose first token after it finds, in every window group,
  // the blocks it reads (a window group gave the older ones back, and may have lost them).
  for (; !found.empty(); found.pop_back()) {
    int64_t blocks = int64_t(found.size());
    bool whole = true;
    for (size_t w = 0; w < windowPools.size() && whole; ++w) {
      std::vector<int32_t> &table = windowed[w];
      table.assign(size_t(blocks), -1);
      for (int64_t b = limits.windowReach(w).firstRead(blocks * size) / size;
           b < blocks && whole; ++b) {
        int32_t anchor = found[size_t(b)];
        std::optional<int32_t> block = windowPools[w].find(
            anchor, pool.generationOf(anchor), s.tokens.data() + b * size, size);
        whole = block.has_value();
        if (whole)
          table[size_t(b)] = *block;
      }
    }
    if (whole)
      break;
  }
  if (found.empty())
    windowed.assign(windowPools.size(), {});
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
    std::vector<std::vector<int32_t>> windowed;
    std::vector<int32_t> found = cachedPrefix(*s, windowed);
    int64_t start = int64_t(found.size()) * limits.blockSize;
    int64_t count = clipScored(*s, std::min(int64_t(s->tokens.size()) - start, budget));
    // A window group may lack the blocks for the whole chunk: it takes what they hold.
    count = clipWindows(windowed, start, count);
    // The blocks it takes in each group: new ones for what it computes, and the cached ones
    // nobody holds, which available() counts as room too.
    auto takes = [&](const BlockPool &from, const std::vector<int32_t> &table) {
      return limits.blocksFor(start + count) - int64_t(table.size()) + idle(from, table);
    };
    bool room = takes(pool, found) <= pool.available();
    for (size_t w = 0; w < windowPools.size() && room; ++w)
      room = takes(windowPools[w], windowed[w]) <= windowPools[w].available();
    if (!room)
      break;
    waitingQueue.pop_front();
    runningList.push_back(s);
    for (int32_t b : found) // held before grow() allocates, which could evict them
      pool.hold(b);
    for (size_t w = 0; w < windowPools.size(); ++w)
      for (int32_t b : windowed[w])
        if (b >= 0)
          windowPools[w].hold(b);
    s->blocks = found;
    s->windowBlocks = std::move(windowed);
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
    int64_t count =
        clipWindows(s->windowBlocks, s->computed, clipScored(*s, std::min(s->pending(), budget)));
    // The victims are the newest not in flight, s itself at the latest. But where s is the
    // newest not in flight only because newer ones are in flight, it waits for their logits
    // instead, admitting nobody meanwhile, and takes the blocks of the newest of them when it
    // is back: preempting itself there would let the newer sequence take its room, the two
    // taking turns to be preempted with neither finishing.
    bool preemptedItself = false;
    while (!fits(*s, count)) {
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
    const int64_t *tokens = s.tokens.data() + s.chained * size;
    int32_t holder = pool.publish(s.blocks[size_t(s.chained)], s.chainParent, s.chainGeneration,
                                  tokens, size, s.salt);
    // The window groups' blocks at the same place, under the block the cache keeps there.
    for (size_t w = 0; w < windowPools.size(); ++w)
      if (int32_t block = s.windowBlocks[w][size_t(s.chained)]; block >= 0)
        windowPools[w].publish(block, holder, pool.generationOf(holder), tokens, size);
    s.chainParent = holder;
    s.chainGeneration = pool.generationOf(holder);
    ++s.chained;
  }
}

void Scheduler::computed(const std::vector<Scheduled> &step) {
  for (const Scheduled &s : step) {
    s.sequence->computed += s.count;
    publish(*s.sequence); // before the window groups give blocks back: they stay cached
    dropUnread(*s.sequence);
  }
}

void Scheduler::finish(Sequence *s) {
  s->inFlight = false;
  releaseBlocks(*s);
  runningList.erase(std::find(runningList.begin(), runningList.end(), s));
}

void Scheduler::remove(Sequence *s) {
  s->inFlight = false;
  releaseBlocks(*s);
  runningList.erase(std::remove(runningList.begin(), runningList.end(), s), runningList.end());
  waitingQueue.erase(std::remove(waitingQueue.begin(), waitingQueue.end(), s),
                     waitingQueue.end());
}

} // namespace tpcrt
