#include "cache/block_pool.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace block_pool_test {

TEST(BlockPool, AllocatesInIdOrderInitially) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(*pool.Allocate(), 0);
  EXPECT_EQ(*pool.Allocate(), 1);
  EXPECT_EQ(*pool.Allocate(), 2);
  EXPECT_EQ(*pool.Allocate(), 3);
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPool, ReusesLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.AllocateMany(4, &ids));
  pool.Release(2);
  pool.Release(0);
  pool.Release(3);
  EXPECT_EQ(pool.FreeListForTest(), (std::vector<BlockId>{2, 0, 3}));
  EXPECT_EQ(*pool.Allocate(), 2);
  EXPECT_EQ(*pool.Allocate(), 0);
  pool.Release(2);
  EXPECT_EQ(pool.FreeListForTest(), (std::vector<BlockId>{3, 2}));
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPool, AllocateManyIsAllOrNothing) {
  BlockPool pool(3);
  std::vector<BlockId> ids;
  EXPECT_FALSE(pool.AllocateMany(4, &ids));
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.AllocateMany(3, &ids));
  EXPECT_EQ(ids, (std::vector<BlockId>{0, 1, 2}));
}

TEST(BlockPool, SharedBlockFreedOnlyAtLastRelease) {
  BlockPool pool(2);
  const BlockId b = *pool.Allocate();
  pool.Acquire(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.Release(b);
  EXPECT_FALSE(pool.is_free(b));
  EXPECT_EQ(pool.num_free(), 1);
  pool.Release(b);
  EXPECT_TRUE(pool.is_free(b));
  EXPECT_EQ(pool.FreeListForTest(), (std::vector<BlockId>{1, 0}));
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPool, AcquireRevivesAFreeBlockOutOfTheList) {
  BlockPool pool(3);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.AllocateMany(3, &ids));
  pool.Release(0);
  pool.Release(1);
  pool.Acquire(0);  // e.g. a cached prefix block hit while free
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.FreeListForTest(), (std::vector<BlockId>{1}));
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPool, IntegrityHoldsOverARandomSequence) {
  BlockPool pool(64);
  std::vector<BlockId> held;
  uint64_t state = 42;
  for (int step = 0; step < 5000; ++step) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const bool alloc = (state >> 33) % 3 != 0;
    if (alloc) {
      if (auto b = pool.Allocate()) held.push_back(*b);
    } else if (!held.empty()) {
      const size_t i = (state >> 40) % held.size();
      pool.Release(held[i]);
      held.erase(held.begin() + static_cast<long>(i));
    }
    ASSERT_EQ(pool.num_used(), static_cast<int>(held.size()));
  }
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
  for (BlockId b : held) pool.Release(b);
  EXPECT_EQ(pool.num_free(), 64);
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPool, CompactRegionHasItsOwnIdsAndFreeList) {
  BlockPool pool(3, 2);
  EXPECT_EQ(pool.num_ids(), 5);
  EXPECT_EQ(pool.num_compact_blocks(), 2);
  EXPECT_EQ(*pool.AllocateCompact(), 3);
  EXPECT_EQ(*pool.AllocateCompact(), 4);
  EXPECT_FALSE(pool.AllocateCompact().has_value());
  EXPECT_EQ(pool.num_free(), 3);  // the main region is untouched
  EXPECT_TRUE(pool.is_compact(3));
  EXPECT_FALSE(pool.is_compact(2));
  pool.Acquire(3);
  pool.Release(3);
  pool.Release(3);  // back to the compact list, not the main one
  EXPECT_EQ(pool.num_compact_free(), 1);
  EXPECT_EQ(pool.FreeListForTest(), (std::vector<BlockId>{0, 1, 2}));
  for (int i = 0; i < 3; ++i) EXPECT_LT(*pool.Allocate(), 3);
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPoolDeathTest, DoubleFreeIsCaught) {
  BlockPool pool(2);
  const BlockId b = *pool.Allocate();
  pool.Release(b);
  EXPECT_DEATH(pool.Release(b), "double free");
}

}  // namespace block_pool_test
}  // namespace kvserve
