// The step descriptor (runtime/engine/step_codec.h): its words where its layout comment puts
// them (the peers of a run read them there), a round trip through encode and decode, and
// descriptors a peer must refuse rather than read past.
#include "step_codec.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace tpcrt {
namespace {

StepLayout smallLayout() {
  StepLayout layout;
  layout.maxTokens = 8;
  layout.maxSequences = 3;
  layout.blocksPerSequence = 2;
  layout.blockSize = 4;
  layout.blocks = 10;
  return layout;
}

TEST(StepCodec, TheWordsAreWhereTheLayoutSays) {
  StepCodec codec(smallLayout());
  // 8 header words, 8 token slots, 3 sequences of 9 words, 3 tables of 2 blocks.
  EXPECT_EQ(codec.length(), 8u + 8u + 27u + 6u);
  std::vector<int64_t> aTokens = {11, 12, 13}, bTokens = {21};
  std::vector<int32_t> aBlocks = {7}, bBlocks = {2, 5};
  std::vector<PlannedSequence> plan = {{aTokens.data(), 3, 0, 0, &aBlocks},
                                       {bTokens.data(), 1, 6, 1, &bBlocks}};
  plan[1].draw = {0.5, 40, 0.25, 0.125, 0.75}; // b's sampled row: a draw, its doubles' bits
  std::vector<int64_t> d;
  codec.encode(plan, /*argmax=*/true, {/*before=*/2, /*after=*/-1, /*beforeIds=*/true}, d);
  ASSERT_EQ(d.size(), codec.length());
  EXPECT_EQ((std::vector<int64_t>(d.begin(), d.begin() + 8)),
            (std::vector<int64_t>{1, 4, 2, 1, 2, -1, 1, 0}));
  EXPECT_EQ((std::vector<int64_t>(d.begin() + 8, d.begin() + 12)),
            (std::vector<int64_t>{11, 12, 13, 21}));
  // IEEE 754 doubles: 1.0 is 0x3ff0..., 0.5 0x3fe0..., 0.25 0x3fd0..., 0.125 0x3fc0...,
  // 0.75 0x3fe8....
  EXPECT_EQ((std::vector<int64_t>(d.begin() + 16, d.begin() + 34)),
            (std::vector<int64_t>{0, 3, 0, 0, 0, 0, 0x3ff0000000000000, 0, 0, //
                                  3, 1, 6, 1, 0x3fe0000000000000, 40, 0x3fd0000000000000,
                                  0x3fc0000000000000, 0x3fe8000000000000}));
  EXPECT_EQ((std::vector<int64_t>(d.begin() + 43, d.begin() + 47)),
            (std::vector<int64_t>{7, 0, 2, 5}));
  DecodedStep out;
  codec.decode(d, out);
  const Draw &draw = out.step.sequences[1].draw;
  EXPECT_EQ(draw.temperature, 0.5);
  EXPECT_EQ(draw.topK, 40);
  EXPECT_EQ(draw.topP, 0.25);
  EXPECT_EQ(draw.minP, 0.125);
  EXPECT_EQ(draw.u, 0.75);
  EXPECT_TRUE(out.step.sequences[0].draw.greedy());
  // A draw no sampler makes is a corrupt descriptor: u of 1, top_p of 0, top_k below -1.
  for (auto [word, bad] : std::vector<std::pair<size_t, int64_t>>{
           {33, 0x3ff0000000000000}, {31, 0}, {30, -2}}) {
    std::vector<int64_t> corrupt = d;
    corrupt[word] = bad;
    EXPECT_THROW(codec.decode(corrupt, out), std::runtime_error) << word;
  }
}

TEST(StepCodec, AWindowGroupsTablesTravelAfterGroupZerosAndMayOmitWhatItDoesNotRead) {
  // A window group (window 3, a pool of 5 blocks) beside group 0: each sequence's two tables
  // in turn, Step::tableStride apart. Blocks before the first the step reads (the query at 6
  // reads 4 ..: block 1 on) may be -1; one it reads may not, nor one past its pool.
  StepLayout layout = smallLayout();
  layout.blocksPerSequence = 3;
  layout.windowReaches = {{3, 0}};
  layout.windowBlocks = {5};
  StepCodec codec(layout);
  EXPECT_EQ(codec.length(), 8u + 8u + 27u + 3u * 2u * 3u);
  std::vector<int64_t> tokens = {21, 22};
  std::vector<int32_t> blocks = {2, 5};
  std::vector<std::vector<int32_t>> windowed = {{-1, 4}};
  std::vector<int64_t> d;
  codec.encode({{tokens.data(), 2, 6, 1, &blocks, &windowed}}, false, {}, d);
  EXPECT_EQ((std::vector<int64_t>(d.begin() + 43, d.begin() + 49)),
            (std::vector<int64_t>{2, 5, 0, -1, 4, 0}));
  DecodedStep out;
  codec.decode(d, out);
  EXPECT_EQ(out.step.tableStride, 3);
  const int32_t *tables = out.step.sequences[0].blocks;
  EXPECT_EQ((std::vector<int32_t>(tables, tables + 5)), (std::vector<int32_t>{2, 5, 0, -1, 4}));
  for (int64_t bad : {-1, 5}) { // block 1 is read; the pool has 5 blocks
    std::vector<int64_t> corrupt = d;
    corrupt[47] = bad;
    EXPECT_THROW(codec.decode(corrupt, out), std::runtime_error) << bad;
  }
}

TEST(StepCodec, WhatTheFirstStageCollectsTravelsAndIsChecked) {
  StepCodec codec(smallLayout());
  std::vector<int64_t> tokens = {1};
  std::vector<int32_t> blocks = {3};
  std::vector<int64_t> d;
  codec.encode({{tokens.data(), 1, 0, 1, &blocks}}, false, {-1, 1, false, true}, d);
  StepCollect c = codec.collect(d);
  EXPECT_EQ(c.before, -1); // none
  EXPECT_EQ(c.after, 1);
  EXPECT_FALSE(c.beforeIds);
  EXPECT_TRUE(c.afterIds); // an argmax step's: one id a row
  codec.encodeSignal(StepKind::Collect, d, {3, -1, /*beforeIds=*/true});
  EXPECT_TRUE(codec.collect(d).beforeIds); // a signal carries the width of what it collects
  codec.encodeSignal(StepKind::Collect, d, {3, -1});
  EXPECT_EQ(codec.kind(d), StepKind::Collect);
  EXPECT_EQ(codec.collect(d).before, 3);
  EXPECT_EQ(codec.collect(d).after, -1);
  EXPECT_FALSE(codec.collect(d).beforeIds);
  DecodedStep out;
  EXPECT_THROW(codec.decode(d, out), std::runtime_error); // no step to run
  for (int64_t bad : {-2, 9}) { // below none, or more rows than a step has tokens
    std::vector<int64_t> wrong = d;
    wrong[4] = bad;
    EXPECT_THROW(codec.collect(wrong), std::runtime_error) << bad;
    wrong = d;
    wrong[5] = bad;
    EXPECT_THROW(codec.collect(wrong), std::runtime_error) << bad;
  }
  for (int64_t bad : {-1, 2}) { // rows as ids: yes or no
    std::vector<int64_t> wrong = d;
    wrong[6] = bad;
    EXPECT_THROW(codec.collect(wrong), std::runtime_error) << bad;
  }
}

TEST(StepCodec, ADecodedStepIsThePlannedOne) {
  StepCodec codec(smallLayout());
  std::vector<int64_t> aTokens = {11, 12, 13}, bTokens = {21};
  std::vector<int32_t> aBlocks = {7}, bBlocks = {2, 5};
  std::vector<PlannedSequence> plan = {{aTokens.data(), 3, 0, 0, &aBlocks},
                                       {bTokens.data(), 1, 6, 1, &bBlocks}};
  std::vector<int64_t> d;
  codec.encode(plan, false, {}, d);
  EXPECT_EQ(codec.kind(d), StepKind::Run);
  DecodedStep out;
  codec.decode(d, out);
  const Step &step = out.step;
  EXPECT_EQ(step.tokens, 4);
  EXPECT_FALSE(step.argmax);
  EXPECT_EQ(std::vector<int64_t>(step.ids, step.ids + 4), (std::vector<int64_t>{11, 12, 13, 21}));
  // Each token's position: after what its sequence has cached.
  EXPECT_EQ(std::vector<int64_t>(step.positions, step.positions + 4),
            (std::vector<int64_t>{0, 1, 2, 6}));
  ASSERT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(step.sequences[0].first, 0);
  EXPECT_EQ(step.sequences[0].count, 3);
  EXPECT_EQ(step.sequences[0].logits, 0);
  EXPECT_EQ(step.sequences[0].blocks[0], 7);
  EXPECT_EQ(step.sequences[1].first, 3);
  EXPECT_EQ(step.sequences[1].cached, 6);
  EXPECT_EQ(step.sequences[1].logits, 1);
  EXPECT_EQ(step.sequences[1].blocks[0], 2);
  EXPECT_EQ(step.sequences[1].blocks[1], 5);
  EXPECT_EQ(step.sampledRows(), 1);
}

TEST(StepCodec, ASequenceScoringItsPromptReturnsSeveralRows) {
  StepCodec codec(smallLayout());
  std::vector<int64_t> aTokens = {11, 12, 13}, bTokens = {21};
  std::vector<int32_t> aBlocks = {7}, bBlocks = {2, 5};
  std::vector<int64_t> d;
  codec.encode({{aTokens.data(), 3, 0, 2, &aBlocks}, {bTokens.data(), 1, 6, 1, &bBlocks}}, false,
               {}, d);
  DecodedStep out;
  codec.decode(d, out);
  EXPECT_EQ(out.step.sequences[0].logits, 2);
  EXPECT_EQ(out.step.sequences[1].logits, 1);
  EXPECT_EQ(out.step.sampledRows(), 3);
}

TEST(StepCodec, SignalsCarryNoStep) {
  StepCodec codec(smallLayout());
  std::vector<int64_t> d;
  codec.encodeSignal(StepKind::Idle, d);
  EXPECT_EQ(codec.kind(d), StepKind::Idle);
  DecodedStep out;
  EXPECT_THROW(codec.decode(d, out), std::runtime_error);
  codec.encodeSignal(StepKind::End, d);
  EXPECT_EQ(codec.kind(d), StepKind::End);
  std::vector<int64_t> end(codec.length(), 0);
  end[4] = end[5] = -1; // nothing to collect
  EXPECT_EQ(d, end);
}

TEST(StepCodec, ACorruptDescriptorIsRefusedNotRead) {
  StepCodec codec(smallLayout());
  std::vector<int64_t> tokens = {1, 2};
  std::vector<int32_t> blocks = {3};
  std::vector<int64_t> good;
  codec.encode({{tokens.data(), 2, 0, 1, &blocks}}, false, {}, good);
  DecodedStep out;
  auto refused = [&](size_t word, int64_t value) {
    std::vector<int64_t> d = good;
    d[word] = value;
    EXPECT_THROW({ codec.kind(d); codec.decode(d, out); }, std::runtime_error)
        << "word " << word << " = " << value;
  };
  refused(0, 7);     // no such kind
  refused(0, -1);
  refused(1, 9);     // more tokens than the layout holds
  refused(2, 4);     // more sequences than the layout holds
  refused(16, -1);   // first token before the step
  refused(17, 3);    // more tokens than the step has
  refused(18, 7);    // cached so many that the table would need 3 blocks
  refused(19, 3);    // more rows of logits than the sequence has tokens
  refused(19, -1);
  refused(20, int64_t(0xbff0000000000000)); // a temperature of -1
  refused(43, 10);   // a block past the cache
  std::vector<int64_t> shorter(good.begin(), good.end() - 1);
  EXPECT_THROW(codec.kind(shorter), std::runtime_error);
}

} // namespace
} // namespace tpcrt
