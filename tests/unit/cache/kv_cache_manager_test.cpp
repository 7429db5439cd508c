#include "cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include "tests/unit/cache/cache_test_util.h"

namespace kvserve {
namespace kv_cache_manager_test {

using cache_test::Blocks;
using cache_test::CompactConfig;

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

TEST(KvCacheManagerCompaction, MovesOldFullPrivateBlocksAndKeepsTheRecentOnes) {
  KvCacheManager m(SmallSpec(4), CompactConfig(8, 4));
  ASSERT_EQ(m.num_compact_blocks(), 4);
  ASSERT_TRUE(m.AllocateSlots(1, 18).has_value());  // blocks 0..4, the last holds 2 tokens
  ASSERT_TRUE(m.Fork(1, 2).has_value());            // 0..3 now shared with sequence 2
  m.Free(2);
  // Keep the newest 6 tokens: blocks ending at or before position 12 are old (0, 1, 2).
  const auto copies = m.Compact(1, 6);
  EXPECT_EQ(copies, (std::vector<std::pair<BlockId, BlockId>>{{0, 8}, {1, 9}, {2, 10}}));
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{8, 9, 10, 3, 4}));
  EXPECT_TRUE(m.is_compact_block(8));
  EXPECT_FALSE(m.is_compact_block(3));
  EXPECT_EQ(m.num_used_blocks(), 2);
  EXPECT_EQ(m.num_free_compact_blocks(), 1);
  EXPECT_TRUE(m.Compact(1, 6).empty());  // nothing old is left in the main region
  // Only one compact block is free: block 3 moves once it is old, block 4 never (partial).
  ASSERT_TRUE(m.AllocateSlots(1, 20).has_value());
  EXPECT_EQ(m.Compact(1, 0).size(), 1u);
  EXPECT_EQ(m.num_free_compact_blocks(), 0);
  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.compact_total_blocks, 4);
  EXPECT_EQ(st.compact_used_blocks, 4);
  EXPECT_EQ(st.compacted_blocks, 4);
  EXPECT_EQ(st.bytes_by_dtype.at("f16"), 8 * static_cast<int64_t>(SmallSpec(4).block_bytes()));
  EXPECT_EQ(st.bytes_by_dtype.at("int8"), 4 * static_cast<int64_t>(CompactConfig(8, 4).compact_spec->block_bytes()));
  m.Free(1);
  EXPECT_EQ(m.num_free_compact_blocks(), 4);
  EXPECT_EQ(m.num_free_blocks(), 8);
}

TEST(KvCacheManagerCompaction, SharedBlocksStayAndPublishedOnesRemainCached) {
  KvCacheManager m(SmallSpec(4), CompactConfig(8, 4));
  const std::vector<int32_t> tokens = cache_test::Range(1, 9);
  ASSERT_TRUE(m.AllocateSlots(1, 9).has_value());
  m.CommitComputed(1, tokens, 9, "");  // blocks 0, 1 published
  ASSERT_EQ(m.AcquireCachedPrefix(2, tokens, ""), 8);  // 0, 1 shared by 1 and 2
  EXPECT_TRUE(m.Compact(1, 0).empty());
  m.Free(2);
  EXPECT_EQ(m.Compact(1, 0).size(), 2u);
  // The main copies stay in the prefix index: a new request still hits them.
  EXPECT_EQ(m.AcquireCachedPrefix(3, tokens, ""), 8);
  EXPECT_EQ(Blocks(m, 3), (std::vector<BlockId>{0, 1}));
  // Sequence 1 no longer publishes (its blocks are compact) but keeps computing.
  ASSERT_TRUE(m.AllocateSlots(1, 8).has_value());
  m.CommitComputed(1, cache_test::Range(1, 17), 17, "");
  EXPECT_TRUE(m.VerifyIntegrity().ok());
}

TEST(KvCacheManagerCompaction, TruncateIntoACompactBlockCopiesItBackAndSwapKeepsRegions) {
  KvCacheManager m(SmallSpec(4), CompactConfig(8, 4, /*num_host=*/8));
  ASSERT_TRUE(m.AllocateSlots(1, 13).has_value());  // 0, 1, 2, 3
  ASSERT_EQ(m.Compact(1, 4).size(), 2u);            // 0, 1 -> 8, 9 (2 ends too late)
  auto plan = m.SwapOut(1);
  ASSERT_TRUE(plan.has_value());
  plan = m.SwapIn(1);
  ASSERT_TRUE(plan.has_value());
  const auto blocks = Blocks(m, 1);
  EXPECT_TRUE(m.is_compact_block(blocks[0]) && m.is_compact_block(blocks[1]));
  EXPECT_FALSE(m.is_compact_block(blocks[2]) || m.is_compact_block(blocks[3]));
  // Cut inside the second (compact) block: it comes back to the main region as a copy.
  const auto copies = m.Truncate(1, 6);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].first, blocks[1]);
  EXPECT_FALSE(m.is_compact_block((*copies)[0].second));
  EXPECT_EQ(m.num_free_compact_blocks(), 3);
  ASSERT_TRUE(m.AllocateSlots(1, 1).has_value());  // writes into the main copy
}

}  // namespace kv_cache_manager_test
}  // namespace kvserve
