// The KV cache's block pool (runtime/engine/block_pool.h): the order it hands blocks out in,
// and holders counted so that a block shared by two sequences is free only when both let go.
#include "block_pool.h"

#include <gtest/gtest.h>

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

TEST(BlockPool, MisuseIsAnInternalError) {
  BlockPool pool(2);
  EXPECT_THROW(pool.release(0), std::logic_error); // free
  EXPECT_THROW(pool.hold(1), std::logic_error);    // free
  EXPECT_THROW(pool.release(2), std::logic_error); // no such block
  EXPECT_THROW(pool.holdersOf(-1), std::logic_error);
}

} // namespace
} // namespace tpcrt
