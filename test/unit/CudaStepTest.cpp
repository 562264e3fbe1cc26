// The CUDA attention's view of a step (runtime/cuda/paged.h), checked on the host: the kernels
// read each row's sequence, each sequence's table of each KV group and the one-row sequences
// from what describeStep makes, find a token's cache row with tableOf and cacheRow and cut a
// decode's keys with splitKeys, so these are what a batched step on the GPU stands on. (The kernels themselves
// run in the GPU check: docs/gpu-check.md.)
#include "paged.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace tpcrt;
using namespace tpcrt::cuda;

namespace {

/// The message of what `f` throws as std::runtime_error, or "" where it does not throw.
template <typename F> std::string thrown(F f) {
  try {
    f();
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(CudaStep, DescribesEachRowsSequenceAndItsTable) {
  // Blocks of 4 tokens. A: a 5-token prompt; B: a decode step after 9 cached tokens; C: a
  // 3-token chunk after 4 cached tokens.
  std::vector<int32_t> a = {7, 2}, b = {0, 1, 3}, c = {4, 5};
  Step step;
  step.tokens = 9;
  step.sequences = {{0, 5, 0, a.data(), 1}, {5, 1, 9, b.data(), 1}, {6, 3, 4, c.data(), 1}};
  StepOnHost d;
  std::vector<GroupOnDevice> every = {{8, {}}}; // one group, of every key: a pool of 8 blocks
  describeStep(step, 4, every, d);
  EXPECT_EQ(d.rowSequence, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(d.decodeList, (std::vector<int32_t>{1}));
  EXPECT_EQ(d.prefills, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(d.tables, (std::vector<int32_t>{7, 2, 0, 1, 3, 4, 5}));
  ASSERT_EQ(d.sequences.size(), 3u);
  EXPECT_EQ(d.sequences[1].table, 2);
  EXPECT_EQ(d.sequences[2].table, 5);
  EXPECT_EQ(d.sequences[2].cached, 4);
  // Where each new row goes, by the tables as written above: A's tokens 0-3 in block 7, its
  // token 4 in block 2; B's token 9 in block 3 (9 / 4 = 2) at 1; C's tokens 4-6 in block 5.
  std::vector<int64_t> expected = {28, 29, 30, 31, 8, 13, 20, 21, 22};
  for (int64_t r = 0; r < step.tokens; ++r) {
    const SequenceOnDevice &s = d.sequences[size_t(d.rowSequence[size_t(r)])];
    EXPECT_EQ(cacheRow(tableOf(d.tables.data(), s, 0), int(s.cached + r - s.first), 4),
              expected[size_t(r)])
        << "row " << r;
  }
  // Described again (the buffers reused), a step of one decode row.
  Step one;
  one.tokens = 1;
  one.sequences = {{0, 1, 3, c.data(), 1}};
  describeStep(one, 4, every, d);
  EXPECT_EQ(d.rowSequence, (std::vector<int32_t>{0}));
  EXPECT_EQ(d.decodeList, (std::vector<int32_t>{0}));
  EXPECT_TRUE(d.prefills.empty());
  EXPECT_EQ(d.tables, (std::vector<int32_t>{4}));
}

TEST(CudaStep, RefusesWhatAKernelWouldReadOutOfBounds) {
  std::vector<int32_t> table = {0, 1, 2};
  StepOnHost d;
  auto describe = [&](std::vector<StepSequence> sequences, int64_t tokens, int64_t blocks = 3) {
    Step step;
    step.tokens = tokens;
    step.sequences = std::move(sequences);
    return thrown([&] { describeStep(step, 4, {{blocks, {}}}, d); });
  };
  EXPECT_EQ(describe({{0, 2, 0, table.data(), 1}}, 2), "");
  // A block given back (a window group's -1), or past the cache.
  std::vector<int32_t> given = {-1, 1};
  EXPECT_NE(describe({{0, 1, 5, given.data(), 1}}, 1).find("names block -1"),
            std::string::npos);
  EXPECT_NE(describe({{0, 2, 9, table.data(), 1}}, 2, 2).find("names block 2"),
            std::string::npos);
  // Rows in two sequences, in none, or outside the step.
  EXPECT_NE(describe({{0, 2, 0, table.data(), 1}, {1, 1, 0, table.data(), 1}}, 2)
                .find("in two sequences"),
            std::string::npos);
  EXPECT_NE(describe({{0, 1, 0, table.data(), 1}}, 2).find("row 1 is in no sequence"),
            std::string::npos);
  EXPECT_NE(describe({{1, 2, 0, table.data(), 1}}, 2).find("step sequence 0"), std::string::npos);
  EXPECT_NE(describe({{0, 0, 0, table.data(), 0}}, 0).find("step sequence 0"), std::string::npos);
  // No table where tokens are held.
  EXPECT_NE(describe({{0, 1, 0, nullptr, 1}}, 1).find("no block table"), std::string::npos);
}

TEST(CudaStep, AWindowGroupsTableIsReadFromTheWindowOn) {
  // Blocks of 4; group 0 reads every key (a pool of 8 blocks), group 1 a window of 6 (a pool
  // of 3). A decode row at position 9 reads group 1's keys 4-9: blocks 1 and 2 of its table;
  // block 0, given back, is -1. The tables are 3 apart in the step.
  std::vector<int32_t> tables = {0, 1, 3, -1, 0, 2};
  Step step;
  step.tokens = 1;
  step.tableStride = 3;
  step.sequences = {{0, 1, 9, tables.data(), 1}};
  std::vector<GroupOnDevice> groups = {{8, {}}, {3, {6, 0}}};
  StepOnHost d;
  describeStep(step, 4, groups, d);
  EXPECT_EQ(d.tables, tables);
  ASSERT_EQ(d.sequences.size(), 1u);
  EXPECT_EQ(d.sequences[0].blocks, 3);
  const int32_t *window = tableOf(d.tables.data(), d.sequences[0], 1);
  EXPECT_EQ(cacheRow(window, 9, 4), 2 * 4 + 1); // position 9: block 2 of its pool, at 1
  EXPECT_EQ(cacheRow(window, 4, 4), 0 * 4 + 0); // the window's first key
  // A -1 the window reads, or a block past the group's pool, is refused, naming the group.
  std::vector<int32_t> lost = {0, 1, 3, -1, -1, 2}, past = {0, 1, 3, -1, 0, 3};
  step.sequences[0].blocks = lost.data();
  EXPECT_NE(thrown([&] { describeStep(step, 4, groups, d); })
                .find("KV group 1 names block -1 for its tokens from 4"),
            std::string::npos);
  step.sequences[0].blocks = past.data();
  EXPECT_NE(thrown([&] { describeStep(step, 4, groups, d); }).find("of a pool of 3 blocks"),
            std::string::npos);
  // A group no layer of this rank's is in (a pipeline stage's) is copied, never read.
  EXPECT_EQ(thrown([&] { describeStep(step, 4, {{8, {}}, {-1, {6, 0}}}, d); }), "");
  // Tables closer together than a sequence's blocks would overlap.
  step.tableStride = 2;
  step.sequences[0].blocks = tables.data();
  EXPECT_NE(thrown([&] { describeStep(step, 4, groups, d); }).find("its tables are 2 apart"),
            std::string::npos);
}

TEST(CudaStep, DecodeSplitsReadEveryVisibleKeyOnce) {
  // Split s of n reads [first, last); together, in order and without overlap, the splits
  // read exactly the keys the query at `position` sees: [max(0, position - window + 1),
  // position], or [0, position] without a window. Each non-empty split but the last reads
  // at least minKeys of them.
  for (int64_t minKeys : {1, 64})
    for (int64_t window : {0, 1, 7, 64, 100, 4096})
      for (int64_t splits : {1, 2, 3, 7, 16, 256})
        for (int64_t position = 0; position < 3000; position += position < 200 ? 1 : 37) {
          int64_t lo = window > 0 ? std::max<int64_t>(0, position - window + 1) : 0;
          int64_t next = lo;
          bool ended = false;
          for (int64_t s = 0; s < splits; ++s) {
            KeyRange r = splitKeys(position, window, splits, s, minKeys);
            if (r.first >= r.last) {
              ended = true;
              continue;
            }
            ASSERT_FALSE(ended) << "a split after an empty one";
            ASSERT_EQ(r.first, next) << position << " " << window << " " << splits << " " << s;
            if (r.last <= position) {
              ASSERT_GE(r.last - r.first, minKeys);
            }
            next = r.last;
          }
          ASSERT_EQ(next, position + 1) << position << " " << window << " " << splits;
        }
}

TEST(CudaStep, DecodeLaunchesHoldNoMorePartialsThanPrepared) {
  // An H100's 132 SMs, 8 blocks a split (8 kv heads, one head chunk), queries of 4096 keys,
  // partials prepared for 64 splits of one sequence: one sequence takes the 64 splits its
  // length could use; two take 32 each (the partials), and 66 blocks per sequence would
  // have given four per SM already at 33.
  EXPECT_EQ(decodeSplits(1, 4096, 132, 8, 64, 64), 64);
  EXPECT_EQ(decodeSplits(2, 4096, 132, 8, 64, 64), 32);
  EXPECT_EQ(decodeSplits(1, 300, 132, 8, 64, 64), 5); // no split that is always empty
  for (int64_t sequences = 1; sequences <= 64; ++sequences) {
    int64_t splits = decodeSplits(sequences, 1 << 20, 132, 8, 64, 64);
    EXPECT_GE(splits, 1);
    EXPECT_LE(sequences * splits, 64) << sequences;
  }
  EXPECT_THROW(decodeSplits(65, 4096, 132, 8, 64, 64), std::logic_error);
  EXPECT_THROW(decodeSplits(0, 4096, 132, 8, 64, 64), std::logic_error);
}

TEST(CudaStep, ACacheRowIsItsBlockTimesTheBlockSizePlusItsOffset) {
  std::vector<int32_t> reversed = {3, 2, 1, 0};
  std::set<int64_t> rows;
  for (int p = 0; p < 16; ++p) {
    int64_t row = cacheRow(reversed.data(), p, 4);
    EXPECT_EQ(row / 4, 3 - p / 4);
    EXPECT_EQ(row % 4, p % 4);
    rows.insert(row);
  }
  EXPECT_EQ(rows.size(), 16u); // every position its own row
}
