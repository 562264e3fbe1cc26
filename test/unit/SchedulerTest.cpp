// Rank 0's scheduler (runtime/engine/scheduler.h) without a model: sequences are token lists,
// a step's forward is `computed`, and each expectation is worked out by hand from the policy
// its header states (decodes first, prompts in chunks under the token budget, admission in
// arrival order, the newest preempted when blocks run out, nobody admitted after a preemption).
#include "scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tpcrt {
namespace {

Sequence promptOf(size_t handle, int64_t length) {
  Sequence s;
  s.handle = handle;
  s.tokens.resize(size_t(length));
  std::iota(s.tokens.begin(), s.tokens.end(), int64_t(100 * handle));
  return s;
}

/// What a step holds, as (handle, count) pairs.
std::vector<std::pair<size_t, int64_t>> shape(const std::vector<Scheduled> &step) {
  std::vector<std::pair<size_t, int64_t>> out;
  for (const Scheduled &s : step)
    out.push_back({s.sequence->handle, s.count});
  return out;
}

/// The step's forward, then a generated token for every sequence it sampled.
void runStep(Scheduler &scheduler, const std::vector<Scheduled> &step) {
  std::vector<Sequence *> sampled;
  for (const Scheduled &s : step)
    if (s.sampled())
      sampled.push_back(s.sequence);
  scheduler.computed(step);
  for (Sequence *s : sampled)
    s->tokens.push_back(0);
}

using Pairs = std::vector<std::pair<size_t, int64_t>>;

TEST(Scheduler, AdmitsInArrivalOrderUpToMaxNumSeqs) {
  Scheduler scheduler({/*maxNumSeqs=*/2, /*maxBatchTokens=*/100, /*blocks=*/10,
                       /*blockSize=*/4, /*maxSeqLen=*/40});
  Sequence a = promptOf(1, 5), b = promptOf(2, 5), c = promptOf(3, 5);
  scheduler.add(&a);
  scheduler.add(&b);
  scheduler.add(&c);
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 5}, {2, 5}}));
  EXPECT_TRUE(step[0].sampled() && step[1].sampled());
  EXPECT_EQ(scheduler.running().size(), 2u);
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), &c);
  // 5 tokens in blocks of 4: two blocks each.
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(scheduler.blocks().available(), 6);
  runStep(scheduler, step);
  scheduler.finish(&a);
  EXPECT_EQ(scheduler.blocks().available(), 8);
  // The freed place goes to c, beside b's decode.
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{2, 1}, {3, 5}}));
}

TEST(Scheduler, NoSequenceOutgrowsItsBlockTable) {
  // --max-model-len 10 in blocks of 4: a table of 3 blocks. A sequence that reaches 10 tokens
  // still runs; one token more is refused before a fourth block is taken.
  Scheduler scheduler({1, 100, 8, 4, /*maxSeqLen=*/10});
  Sequence a = promptOf(1, 9);
  scheduler.add(&a);
  runStep(scheduler, scheduler.schedule()); // 9 computed, a 10th token generated
  runStep(scheduler, scheduler.schedule()); // 10 computed, an 11th generated
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_THROW(scheduler.schedule(), std::logic_error);
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(scheduler.blocks().available(), 5);
}

TEST(Scheduler, ALongPromptIsPrefilledInChunksBesideDecodes) {
  Scheduler scheduler({4, /*maxBatchTokens=*/8, 20, 4, 64});
  Sequence a = promptOf(1, 3), b = promptOf(2, 20);
  scheduler.add(&a);
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 3}}));
  runStep(scheduler, step);
  scheduler.add(&b);
  // a decodes one token; b's prompt takes what the budget leaves: 7, then 7, then 6.
  for (int64_t chunk : {7, 7, 6}) {
    step = scheduler.schedule();
    ASSERT_EQ(shape(step), (Pairs{{1, 1}, {2, chunk}}));
    EXPECT_TRUE(step[0].sampled());
    EXPECT_EQ(step[1].sampled(), chunk == 6); // only the prompt's last chunk is sampled
    runStep(scheduler, step);
  }
  EXPECT_EQ(b.computed, 20);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{1, 1}, {2, 1}}));
}

TEST(Scheduler, TheNewestRunningSequenceIsPreemptedAndNobodyAdmitted) {
  // Four blocks of four tokens; three sequences of four-token prompts take three of them.
  Scheduler scheduler({4, 64, /*blocks=*/4, /*blockSize=*/4, 16});
  Sequence a = promptOf(1, 4), b = promptOf(2, 4), c = promptOf(3, 4), d = promptOf(4, 1);
  for (Sequence *s : {&a, &b, &c})
    scheduler.add(s);
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 4}, {2, 4}, {3, 4}}));
  EXPECT_EQ(scheduler.blocks().available(), 1);
  runStep(scheduler, step); // each now has a fifth token, which needs a second block
  scheduler.add(&d);
  // a takes the last block; b needs one more: c, the newest, gives its block back and goes to
  // the front of the queue, before d; d is not admitted in a step that preempted.
  step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 1}, {2, 1}}));
  EXPECT_EQ(scheduler.preemptions(), 1);
  EXPECT_EQ(c.preempted, 1);
  EXPECT_EQ(c.computed, 0); // recomputed from its prompt and output
  EXPECT_TRUE(c.blocks.empty());
  ASSERT_EQ(scheduler.waiting().size(), 2u);
  EXPECT_EQ(scheduler.waiting()[0], &c);
  EXPECT_EQ(scheduler.waiting()[1], &d);
  EXPECT_EQ(scheduler.blocks().available(), 0);
}

TEST(Scheduler, TheNewestPreemptsItselfWhenItIsTheOneShortOfBlocks) {
  Scheduler scheduler({4, 64, /*blocks=*/3, /*blockSize=*/4, 16});
  Sequence a = promptOf(1, 7), b = promptOf(2, 4);
  scheduler.add(&a);
  scheduler.add(&b);
  runStep(scheduler, scheduler.schedule()); // a: two blocks, b: one; none left
  // a's eighth token fits its second block; b's fifth needs a block, and b is the newest: it
  // gives its own back and waits, and the step runs a alone.
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{1, 1}}));
  EXPECT_EQ(b.preempted, 1);
  EXPECT_EQ(a.preempted, 0);
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), &b);
  EXPECT_EQ(scheduler.blocks().available(), 1);
}

TEST(Scheduler, EveryBlockComesBackFromFinishedAndRemovedSequences) {
  Scheduler scheduler({2, 64, 8, 4, 32});
  Sequence a = promptOf(1, 9), b = promptOf(2, 2), c = promptOf(3, 2);
  for (Sequence *s : {&a, &b, &c})
    scheduler.add(s);
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(scheduler.blocks().available(), 8 - 3 - 1);
  runStep(scheduler, step);
  scheduler.remove(&c); // waiting: nothing to give back
  scheduler.remove(&a); // running
  EXPECT_EQ(scheduler.blocks().available(), 8 - 1);
  scheduler.finish(&b);
  EXPECT_FALSE(scheduler.busy());
  EXPECT_EQ(scheduler.blocks().available(), 8);
  EXPECT_TRUE(scheduler.schedule().empty());
}

// Pipeline stages: a sequence whose step is in flight has no next token yet. The others run
// without it, at most `most` a step; it is never the one preempted; and with nothing else to
// run, the step is empty (the engine waits for the logits in flight).
TEST(Scheduler, SequencesInFlightWaitForTheirLogits) {
  Scheduler scheduler({/*maxNumSeqs=*/4, /*maxBatchTokens=*/100, /*blocks=*/4,
                       /*blockSize=*/4, /*maxSeqLen=*/16});
  Sequence a = promptOf(1, 4), b = promptOf(2, 4), c = promptOf(3, 4);
  scheduler.add(&a);
  scheduler.add(&b);
  scheduler.add(&c);
  std::vector<Scheduled> first = scheduler.schedule(/*most=*/2);
  EXPECT_EQ(shape(first), (Pairs{{1, 4}, {2, 4}}));
  a.inFlight = b.inFlight = true;
  runStep(scheduler, first);
  // a and b are in flight: c alone, though a and b have a token to compute.
  std::vector<Scheduled> second = scheduler.schedule(2);
  EXPECT_EQ(shape(second), (Pairs{{3, 4}}));
  c.inFlight = true;
  runStep(scheduler, second);
  EXPECT_TRUE(scheduler.schedule(2).empty()); // all three in flight
  // a's logits are back; its next token needs a second block and none is free (a, b and c
  // hold one each, and the fourth): b and c are in flight, so nobody can be preempted but a
  // itself, which is the newest not in flight.
  a.inFlight = false;
  std::vector<Scheduled> third = scheduler.schedule(2);
  EXPECT_EQ(shape(third), (Pairs{{1, 1}}));
  EXPECT_EQ(scheduler.preemptions(), 0);
  a.inFlight = true;
  runStep(scheduler, third);
  // c back: it needs a block and the pool is empty; the newest not in flight is c itself,
  // which goes back to the queue to be recomputed, and the step is empty.
  c.inFlight = false;
  std::vector<Scheduled> fourth = scheduler.schedule(2);
  EXPECT_TRUE(fourth.empty());
  EXPECT_EQ(scheduler.preemptions(), 1);
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), &c);
}

// Pipeline stages again: the oldest sequence short of blocks, whose only newer one is in
// flight, waits for it and then takes its blocks, instead of preempting itself and leaving
// the newer one its room (the two would take turns, neither finishing).
TEST(Scheduler, AnOlderSequenceShortOfBlocksWaitsForANewerOneInFlight) {
  Scheduler scheduler({4, 100, /*blocks=*/3, /*blockSize=*/4, 16});
  Sequence a = promptOf(1, 4), b = promptOf(2, 8);
  scheduler.add(&a);
  scheduler.add(&b);
  std::vector<Scheduled> first = scheduler.schedule(1);
  EXPECT_EQ(shape(first), (Pairs{{1, 4}}));
  a.inFlight = true;
  runStep(scheduler, first); // a: 5 tokens, one block
  std::vector<Scheduled> second = scheduler.schedule(1);
  EXPECT_EQ(shape(second), (Pairs{{2, 8}}));
  b.inFlight = true;
  runStep(scheduler, second); // b: two blocks; none left
  a.inFlight = false;         // a's fifth token needs a block; b, newer, is in flight
  EXPECT_TRUE(scheduler.schedule(1).empty());
  EXPECT_EQ(scheduler.preemptions(), 0);
  b.inFlight = false; // b back: a takes its blocks
  EXPECT_EQ(shape(scheduler.schedule(1)), (Pairs{{1, 1}}));
  EXPECT_EQ(a.preempted, 0);
  EXPECT_EQ(b.preempted, 1);
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), &b);
}

// Prefix caching: blocks of 4; a block is cached once a step has computed it full.
EngineLimits caching(bool on = true) {
  EngineLimits limits{/*maxNumSeqs=*/4, /*maxBatchTokens=*/100, /*blocks=*/10,
                      /*blockSize=*/4, /*maxSeqLen=*/40};
  limits.prefixCaching = on;
  return limits;
}

TEST(Scheduler, APromptThatBeginsAsAnEarlierOneStartsAfterItsCachedBlocks) {
  Scheduler scheduler(caching());
  Sequence a = promptOf(1, 10);
  scheduler.add(&a);
  runStep(scheduler, scheduler.schedule()); // blocks 0 and 1 full, the third holds 2 tokens
  std::vector<int32_t> first(a.blocks.begin(), a.blocks.begin() + 2);
  scheduler.finish(&a);
  EXPECT_EQ(scheduler.blocks().evictable(), 2); // the two full ones, kept
  EXPECT_EQ(scheduler.blocks().available(), 10);
  // b shares a's first 9 tokens: both full blocks of them are found.
  Sequence b = promptOf(1, 10);
  b.handle = 2;
  b.tokens[9] = 999;
  scheduler.add(&b);
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{2, 2}}));
  EXPECT_EQ(b.cachedTokens, 8);
  EXPECT_EQ(std::vector<int32_t>(b.blocks.begin(), b.blocks.begin() + 2), first);
  EXPECT_EQ(scheduler.blocks().evictable(), 0);
  EXPECT_EQ(scheduler.prefixQueries(), 20);
  EXPECT_EQ(scheduler.prefixHits(), 8);
  runStep(scheduler, step);
  // A prompt of exactly those 8 tokens: its last token is computed (its logits choose the
  // next), so only the first block is taken, and it is shared with b, which runs.
  Sequence c = promptOf(1, 8);
  c.handle = 3;
  scheduler.add(&c);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{2, 1}, {3, 4}}));
  EXPECT_EQ(c.cachedTokens, 4);
  EXPECT_EQ(c.blocks.front(), first.front());
  EXPECT_EQ(scheduler.blocks().holdersOf(first.front()), 2);
}

TEST(Scheduler, AnotherPromptOrCachingOffFindsNothing) {
  for (bool on : {false, true}) {
    Scheduler scheduler(caching(on));
    Sequence a = promptOf(1, 9), b = promptOf(1, 9);
    b.tokens[0] = 7; // the first block differs, so nothing after it is found either
    scheduler.add(&a);
    runStep(scheduler, scheduler.schedule());
    scheduler.finish(&a);
    scheduler.add(&b);
    std::vector<Scheduled> step = scheduler.schedule();
    EXPECT_EQ(shape(step), (Pairs{{1, 9}})) << on;
    EXPECT_EQ(b.cachedTokens, 0);
    EXPECT_EQ(scheduler.prefixHits(), 0);
    EXPECT_EQ(scheduler.prefixQueries(), on ? 18 : 0);
    runStep(scheduler, step);
    // a's own prompt again: found, where caching is on.
    Sequence c = promptOf(1, 9);
    scheduler.add(&c);
    EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{1, 1}, {1, on ? 1 : 9}})) << on;
  }
}

TEST(Scheduler, TwinsInOneStepComputeAlikeAndTheCacheKeepsOneCopy) {
  Scheduler scheduler(caching());
  Sequence a = promptOf(1, 9), b = promptOf(1, 9), c = promptOf(1, 9);
  scheduler.add(&a);
  scheduler.add(&b);
  // Admitted together: nothing is cached yet, both compute every token.
  std::vector<Scheduled> step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 9}, {1, 9}}));
  runStep(scheduler, step);
  // c finds a's blocks (published first); b's copies are not cached.
  scheduler.add(&c);
  scheduler.schedule();
  EXPECT_EQ(c.cachedTokens, 8);
  EXPECT_EQ(c.blocks[0], a.blocks[0]);
  EXPECT_EQ(c.blocks[1], a.blocks[1]);
  for (Sequence *s : {&a, &b, &c})
    scheduler.finish(s);
  EXPECT_EQ(scheduler.blocks().evictable(), 2);
  EXPECT_EQ(scheduler.blocks().held(), 0);
  EXPECT_EQ(scheduler.blocks().available(), 10);
}

TEST(Scheduler, APreemptedSequenceFindsItsOwnBlocksWhenReadmitted) {
  // Five blocks of 4. a (8 tokens) and b (8) take four; a's decode takes the fifth, then
  // b's needs one more: b, the newest, is preempted. Its two full blocks stay cached (the
  // pool has none free, so none is evicted before b comes back), and when a finishes b is
  // readmitted on them: only its last block's tokens are computed again.
  EngineLimits limits{4, 100, /*blocks=*/5, /*blockSize=*/4, 40};
  limits.prefixCaching = true;
  Scheduler scheduler(limits);
  Sequence a = promptOf(1, 8), b = promptOf(2, 8);
  scheduler.add(&a);
  scheduler.add(&b);
  runStep(scheduler, scheduler.schedule()); // 8 each: two full blocks each, all cached
  std::vector<int32_t> own = b.blocks;
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{1, 1}})); // a grows; b is preempted
  EXPECT_EQ(b.preempted, 1);
  EXPECT_EQ(scheduler.blocks().evictable(), 2); // b's, kept
  scheduler.finish(&a);
  std::vector<Scheduled> step = scheduler.schedule();
  // b has 9 tokens now (its sampled one): its two full blocks are found, one token computed.
  EXPECT_EQ(shape(step), (Pairs{{2, 1}}));
  EXPECT_EQ(std::vector<int32_t>(b.blocks.begin(), b.blocks.begin() + 2), own);
  EXPECT_EQ(b.cachedTokens, 0); // counted at its first admission only
  EXPECT_EQ(scheduler.prefixHits(), 8);
}

TEST(Scheduler, BlocksFilledByDecodeAreCachedToo) {
  // A conversation's next turn holds its earlier answer: blocks a decode fills are cached.
  Scheduler scheduler(caching());
  Sequence a = promptOf(1, 3);
  scheduler.add(&a);
  for (int i = 0; i < 6; ++i) // 3 prompt tokens, then 6 decodes: 8 computed, 9 tokens
    runStep(scheduler, scheduler.schedule());
  EXPECT_EQ(a.computed, 8);
  std::vector<int64_t> turn = a.tokens;
  scheduler.finish(&a);
  Sequence b;
  b.handle = 2;
  b.tokens = turn;
  b.tokens.push_back(5);
  scheduler.add(&b);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{2, 2}}));
  EXPECT_EQ(b.cachedTokens, 8);
}

// KV groups (tpcrt/kv_groups.h): layers with a sliding window keep only the blocks their
// later queries read. Limits of blocks of 4 tokens, a group 0 of `full` blocks and one window
// group of window 6 (a query at p reads p - 5 .. p) of `windowed` blocks.
EngineLimits windowLimits(int64_t full, int64_t windowed, bool caching = false) {
  EngineLimits limits{/*maxNumSeqs=*/4, /*maxBatchTokens=*/100, full, /*blockSize=*/4,
                      /*maxSeqLen=*/40, caching};
  limits.groups = kvGroups({{}, {6, 0}}, 40, true);
  limits.windowBlocks = {windowed};
  return limits;
}

TEST(Scheduler, AWindowGroupGivesBackTheBlocksNoLaterQueryReads) {
  Scheduler scheduler(windowLimits(20, 6));
  Sequence a = promptOf(1, 10);
  scheduler.add(&a);
  runStep(scheduler, scheduler.schedule()); // positions 0-9 computed
  // The next query, at 10, reads 5 .. 10: blocks 1 and 2 (positions 4-11). Block 0 is given
  // back; group 0 keeps all three.
  ASSERT_EQ(a.windowBlocks.size(), 1u);
  EXPECT_EQ(a.blocks.size(), 3u);
  ASSERT_EQ(a.windowBlocks[0].size(), 3u);
  EXPECT_EQ(a.windowBlocks[0][0], -1);
  EXPECT_GE(a.windowBlocks[0][1], 0);
  EXPECT_GE(a.windowBlocks[0][2], 0);
  EXPECT_EQ(scheduler.windowBlocks(0).available(), 4);
  EXPECT_EQ(scheduler.blocks().available(), 17);
  for (int i = 0; i < 2; ++i) // positions 10, 11: the next reads 7 .. 12, blocks 1-3
    runStep(scheduler, scheduler.schedule());
  EXPECT_EQ(a.windowBlocks[0].size(), 3u); // block 3 not taken before position 12 needs it
  runStep(scheduler, scheduler.schedule()); // 12: the next reads 8 .. 13, blocks 2-3
  EXPECT_EQ(a.computed, 13);
  EXPECT_EQ(a.windowBlocks[0][1], -1);
  EXPECT_EQ(scheduler.windowBlocks(0).available(), 4);
  EXPECT_EQ(scheduler.blocks().available(), 16);
  scheduler.finish(&a);
  EXPECT_EQ(scheduler.windowBlocks(0).available(), 6);
  EXPECT_EQ(scheduler.blocks().available(), 20);
}

TEST(Scheduler, AWindowGroupAdmitsSequencesItsBlocksHold) {
  // Prompts of 30 tokens. Group 0 (20 blocks) holds two of their 8 blocks; the window group
  // (6 blocks) holds a whole prompt's chunk of them for one at a time only: the first prompt
  // is computed in chunks the window group holds, giving its blocks back after each.
  Scheduler scheduler(windowLimits(20, 6));
  Sequence a = promptOf(1, 30), b = promptOf(2, 30);
  scheduler.add(&a);
  scheduler.add(&b);
  std::vector<Scheduled> step = scheduler.schedule();
  // a: 6 blocks of 4 tokens, 24 tokens; b: nothing left in the window group.
  EXPECT_EQ(shape(step), (Pairs{{1, 24}}));
  runStep(scheduler, step);
  // a's next query, at 24, reads 19 ..: blocks 4 and 5 are kept, four given back. a's rest
  // takes two of them, b's first chunk the other two (8 tokens).
  EXPECT_EQ(scheduler.windowBlocks(0).available(), 4);
  step = scheduler.schedule();
  EXPECT_EQ(shape(step), (Pairs{{1, 6}, {2, 8}}));
}

TEST(Scheduler, WindowGroupsFindTheirCachedBlocksUnderGroupZeros) {
  Scheduler scheduler(windowLimits(20, 12, /*caching=*/true));
  Sequence a = promptOf(1, 21);
  scheduler.add(&a);
  runStep(scheduler, scheduler.schedule());
  // a's window table gave blocks 0-3 back (its next query, at 21, reads 16 ..), each cached.
  EXPECT_EQ(a.windowBlocks[0][3], -1);
  int32_t kept = a.windowBlocks[0][4];
  std::vector<int64_t> prompt(a.tokens.begin(), a.tokens.begin() + 21);
  scheduler.finish(&a);
  // b's prompt is a's: 5 full blocks before its last token. The query after them, at 20,
  // reads 15 ..: blocks 3 and 4 of the window group, found where a left them.
  Sequence b;
  b.handle = 2;
  b.tokens = prompt;
  scheduler.add(&b);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{2, 1}}));
  EXPECT_EQ(b.cachedTokens, 20);
  ASSERT_EQ(b.windowBlocks[0].size(), 6u);
  EXPECT_EQ(b.windowBlocks[0][2], -1);
  EXPECT_GE(b.windowBlocks[0][3], 0); // given back by a, still cached
  EXPECT_EQ(b.windowBlocks[0][4], kept);
}

TEST(Scheduler, APrefixIsShortenedToWhereTheWindowGroupStillHasItsBlocks) {
  // The window group's cached blocks are evicted (another sequence takes them), group 0's are
  // not: the prefix whose window blocks are gone is not taken.
  Scheduler scheduler(windowLimits(40, 8, /*caching=*/true));
  Sequence a = promptOf(1, 21);
  scheduler.add(&a);
  runStep(scheduler, scheduler.schedule());
  std::vector<int64_t> prompt(a.tokens.begin(), a.tokens.begin() + 21);
  scheduler.finish(&a);
  // c takes every window block: 8 blocks, 32 tokens at once, evicting all of a's.
  Sequence c = promptOf(3, 33);
  scheduler.add(&c);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{3, 32}}));
  scheduler.remove(&c);
  Sequence b;
  b.handle = 2;
  b.tokens = prompt;
  scheduler.add(&b);
  EXPECT_EQ(shape(scheduler.schedule()), (Pairs{{2, 21}}));
  EXPECT_EQ(b.cachedTokens, 0);
}

TEST(Scheduler, Gemma3OneBsShapeHoldsFourTimesTheLongSequences) {
  // Gemma 3 1B: 26 layers, each sixth reads every key, the others a window of 512; blocks of
  // 16; sequences of 8192 tokens. A budget of 4 such sequences with every layer keeping every
  // key holds 4 * 26 * 512 layer-blocks. A sequence keeps 512 blocks in the 4 global layers
  // and 33 (512 tokens back and its own, over block boundaries) in the 22 local ones: 2774,
  // so the budget holds 19 of them.
  std::vector<KvReach> layers(26, KvReach{512, 0});
  for (int l = 5; l < 26; l += 6)
    layers[size_t(l)] = {};
  EngineLimits limits{/*maxNumSeqs=*/64, /*maxBatchTokens=*/8192, 0, 16, /*maxSeqLen=*/8192};
  limits.groups = kvGroups(layers, 8192, true);
  std::vector<int64_t> pools = kvPoolBlocks(limits.groups, std::vector<double>(26, 1.0), {},
                                            4 * 8192, 16, 8192, 64);
  ASSERT_EQ(pools.size(), 2u);
  // 4 * 26 * 512 / 2774 = 19.195 sequences: 9828.0 and 633.4 blocks.
  EXPECT_EQ(pools[0], 9828);
  EXPECT_EQ(pools[1], 633);
  limits.blocks = pools[0];
  limits.windowBlocks = {pools[1]};
  // Prompts of 8192 tokens until the cache holds no more: a prompt computed whole is then
  // held (marked in flight: neither scheduled nor preempted), its blocks kept.
  auto held = [](Scheduler &scheduler, std::vector<Sequence> &all) {
    for (Sequence &s : all)
      scheduler.add(&s);
    for (std::vector<Scheduled> step = scheduler.schedule(); !step.empty();
         step = scheduler.schedule()) {
      scheduler.computed(step);
      for (const Scheduled &s : step)
        s.sequence->inFlight = s.sequence->pending() == 0;
    }
    return std::count_if(all.begin(), all.end(),
                         [](const Sequence &s) { return s.inFlight && s.computed == 8192; });
  };
  std::vector<Sequence> windowed, whole;
  for (size_t i = 0; i < 24; ++i) {
    windowed.push_back(promptOf(i + 1, 8192));
    whole.push_back(promptOf(i + 1, 8192));
  }
  Scheduler kept(limits);
  EXPECT_EQ(held(kept, windowed), 19);
  EngineLimits everyKey{64, 8192, 4 * 8192 / 16, 16, 8192};
  Scheduler all(everyKey);
  EXPECT_EQ(held(all, whole), 4);
}

} // namespace
} // namespace tpcrt
