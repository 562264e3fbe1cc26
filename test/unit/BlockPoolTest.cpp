// The KV cache's block pool (runtime/engine/block_pool.h): the order it hands blocks out in,
// and holders counted so that a block shared by two sequences is free only when both let go.
#include "block_pool.h"

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>

namespace tpcrt {
namespace {

TEST(BlockPool, AFreshPoolGivesBlockZeroFirst) {
  BlockPool pool(4);
  EXPECT_EQ(pool.total(), 4);
  EXPECT_EQ(pool.available(), 4);
  for (int32_t expected = 0; expected < 4; ++expected)
    EXPECT_EQ(pool.allocate(), expected);
  EXPECT_EQ(pool.available(), 0);
  EXPECT_THROW(pool.allocate(), std::logic_error);
}

TEST(BlockPool, ATableReleasedIsReusedInItsOrder) {
  BlockPool pool(6);
  std::vector<int32_t> a = {pool.allocate(), pool.allocate(), pool.allocate()}; // 0 1 2
  pool.allocate();                                                              // 3
  pool.releaseAll(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.available(), 5);
  // The released table's blocks come back first, in the table's order.
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), 4);
}

TEST(BlockPool, ASharedBlockIsFreeOnlyWhenItsLastHolderLetsGo) {
  BlockPool pool(2);
  int32_t b = pool.allocate();
  pool.hold(b);
  EXPECT_EQ(pool.holdersOf(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.available(), 1);
  EXPECT_EQ(pool.holdersOf(b), 1);
  pool.release(b);
  EXPECT_EQ(pool.available(), 2);
  EXPECT_EQ(pool.holdersOf(b), 0);
}

std::vector<int64_t> tokens(int64_t first, int64_t count = 4) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[size_t(i)] = first + i;
  return out;
}

TEST(BlockPool, ACachedBlockIsKeptWhenReleasedAndFoundByItsOrigin) {
  BlockPool pool(3);
  int32_t b = pool.allocate();
  std::vector<int64_t> t = tokens(10);
  EXPECT_EQ(pool.publish(b, -1, 0, t.data(), 4), b);
  pool.release(b);
  // Free to allocate, and still found.
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.evictable(), 1);
  EXPECT_EQ(pool.held(), 0);
  EXPECT_EQ(pool.find(-1, t.data(), 4), std::optional<int32_t>(b));
  // Origins are compared whole: one token off, or another parent, is another block.
  std::vector<int64_t> other = t;
  other[3] = 99;
  EXPECT_FALSE(pool.find(-1, other.data(), 4));
  EXPECT_FALSE(pool.find(b, t.data(), 4));
  // Held again, it is no longer evictable.
  pool.hold(b);
  EXPECT_EQ(pool.evictable(), 0);
  EXPECT_EQ(pool.available(), 2);
  pool.hold(b);
  EXPECT_EQ(pool.holdersOf(b), 2);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.evictable(), 1);
}

TEST(BlockPool, FreeBlocksGoFirstThenTheCachedOneReleasedLongestAgo) {
  BlockPool pool(3);
  int32_t a = pool.allocate(), b = pool.allocate(); // 0 1
  std::vector<int64_t> ta = tokens(0), tb = tokens(4);
  pool.publish(a, -1, 0, ta.data(), 4);
  pool.publish(b, -1, 0, tb.data(), 4);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.allocate(), 2);   // the free one
  EXPECT_EQ(pool.allocate(), a);   // then a, released before b: forgotten
  EXPECT_FALSE(pool.find(-1, ta.data(), 4));
  EXPECT_EQ(pool.find(-1, tb.data(), 4), std::optional<int32_t>(b));
  EXPECT_EQ(pool.allocate(), b);
  EXPECT_FALSE(pool.find(-1, tb.data(), 4));
  EXPECT_THROW(pool.allocate(), std::logic_error);
}

TEST(BlockPool, ATableReleasedKeepsItsFirstBlockLongest) {
  // A sequence's blocks released together: its first block, the one most prompts share, is
  // evicted last.
  BlockPool pool(3);
  std::vector<int32_t> table = {pool.allocate(), pool.allocate(), pool.allocate()};
  int32_t parent = -1;
  for (int32_t i = 0; i < 3; ++i) {
    std::vector<int64_t> t = tokens(4 * i);
    pool.publish(table[size_t(i)], parent, parent < 0 ? 0 : pool.generationOf(parent),
                 t.data(), 4);
    parent = table[size_t(i)];
  }
  std::vector<int32_t> released = table;
  pool.releaseAll(released);
  EXPECT_EQ(pool.allocate(), table[2]);
  EXPECT_EQ(pool.allocate(), table[1]);
  EXPECT_EQ(pool.allocate(), table[0]);
}

TEST(BlockPool, AChildIsNotFoundOnceItsParentIsGivenOutAgain) {
  BlockPool pool(3);
  int32_t p = pool.allocate(), c = pool.allocate();
  std::vector<int64_t> tp = tokens(0), tc = tokens(4);
  pool.publish(p, -1, 0, tp.data(), 4);
  uint64_t generation = pool.generationOf(p);
  pool.publish(c, p, generation, tc.data(), 4);
  EXPECT_EQ(pool.find(p, tc.data(), 4), std::optional<int32_t>(c));
  // p released first, so evicted first, while its child c stays cached.
  pool.release(p);
  pool.release(c);
  pool.allocate(); // the free block
  EXPECT_EQ(pool.allocate(), p);
  EXPECT_NE(pool.generationOf(p), generation);
  EXPECT_EQ(pool.evictable(), 1); // c, still kept
  // Block p now holds something else: c's origin names p's old generation, so a lookup
  // under p finds nothing, even for c's tokens.
  EXPECT_FALSE(pool.find(p, tc.data(), 4));
  EXPECT_FALSE(pool.find(-1, tp.data(), 4));
}

TEST(BlockPool, AFirstBlockIsFoundOnlyUnderItsSalt) {
  BlockPool pool(2);
  int32_t a = pool.allocate(), b = pool.allocate();
  std::vector<int64_t> t = tokens(3), u = tokens(9);
  pool.publish(a, -1, 0, t.data(), 4, "tenant");
  pool.publish(b, a, pool.generationOf(a), u.data(), 4, "ignored past the first block");
  EXPECT_FALSE(pool.find(-1, t.data(), 4));
  EXPECT_FALSE(pool.find(-1, t.data(), 4, "other"));
  EXPECT_EQ(pool.find(-1, t.data(), 4, "tenant"), std::optional<int32_t>(a));
  EXPECT_EQ(pool.find(a, u.data(), 4), std::optional<int32_t>(b));
}

TEST(BlockPool, AnOriginPublishedTwiceKeepsItsFirstBlock) {
  BlockPool pool(2);
  int32_t a = pool.allocate(), b = pool.allocate();
  std::vector<int64_t> t = tokens(7);
  EXPECT_EQ(pool.publish(a, -1, 0, t.data(), 4), a);
  EXPECT_EQ(pool.publish(b, -1, 0, t.data(), 4), a);
  pool.release(b); // not cached: free at once
  EXPECT_EQ(pool.evictable(), 0);
  EXPECT_EQ(pool.available(), 1);
  EXPECT_THROW(pool.publish(a, -1, 0, t.data(), 4), std::logic_error); // twice
}

TEST(BlockPool, MisuseIsAnInternalError) {
  BlockPool pool(2);
  EXPECT_THROW(pool.release(0), std::logic_error); // free
  EXPECT_THROW(pool.hold(1), std::logic_error);    // free
  EXPECT_THROW(pool.release(2), std::logic_error); // no such block
  EXPECT_THROW(pool.holdersOf(-1), std::logic_error);
}

} // namespace
} // namespace tpcrt
