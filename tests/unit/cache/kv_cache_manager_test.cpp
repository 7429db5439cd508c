#include "cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include "tests/unit/cache/cache_test_util.h"

namespace kvserve {
namespace {

using cache_test::Blocks;

KvSpec SmallSpec(int block_size = 4) {
  KvSpecConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.block_size = block_size;
  return *KvSpec::Create(c);
}

TEST(KvCacheManager, AllocatesBlocksOnlyWhenTheTableIsFull) {
  KvCacheManager m(SmallSpec(4), 8);
  auto added = m.AllocateSlots(1, 6);  // 6 tokens -> 2 blocks
  ASSERT_TRUE(added.has_value());
  EXPECT_EQ(*added, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(m.table(1).num_tokens(), 6);
  added = m.AllocateSlots(1, 2);  // fills block 1 exactly
  ASSERT_TRUE(added.has_value());
  EXPECT_TRUE(added->empty());
  added = m.AllocateSlots(1, 1);  // spills into a third block
  EXPECT_EQ(*added, (std::vector<BlockId>{2}));
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(m.num_used_blocks(), 3);
  EXPECT_TRUE(m.VerifyIntegrity().ok());
}

TEST(KvCacheManager, NoRoomLeavesEverythingUnchanged) {
  KvCacheManager m(SmallSpec(4), 3);
  ASSERT_TRUE(m.AllocateSlots(1, 8).has_value());
  EXPECT_FALSE(m.AllocateSlots(2, 8).has_value());
  EXPECT_FALSE(m.Contains(2));
  EXPECT_EQ(m.num_free_blocks(), 1);
  EXPECT_EQ(m.BlocksNeeded(1, 1), 1);
  EXPECT_FALSE(m.AllocateSlots(1, 5).has_value());
  EXPECT_EQ(m.table(1).num_tokens(), 8);
  EXPECT_TRUE(m.VerifyIntegrity().ok());
}

TEST(KvCacheManager, FreeReturnsBlocksLastBlockFirst) {
  KvCacheManager m(SmallSpec(4), 6);
  ASSERT_TRUE(m.AllocateSlots(1, 12).has_value());  // blocks 0,1,2
  ASSERT_TRUE(m.AllocateSlots(2, 4).has_value());   // block 3
  m.Free(1);
  EXPECT_FALSE(m.Contains(1));
  EXPECT_EQ(m.num_free_blocks(), 5);
  // Free list: 4, 5 (never used), then 2, 1, 0 (freed in reverse).
  auto added = m.AllocateSlots(3, 20);
  EXPECT_EQ(*added, (std::vector<BlockId>{4, 5, 2, 1, 0}));
  EXPECT_DOUBLE_EQ(m.usage_ratio(), 1.0);
  EXPECT_TRUE(m.VerifyIntegrity().ok());
  m.Free(2);
  m.Free(3);
  m.Free(99);  // unknown: no-op
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_TRUE(m.VerifyIntegrity().ok());
}

}  // namespace
}  // namespace kvserve
