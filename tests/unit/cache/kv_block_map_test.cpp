// KvCacheManager::BlockMap: every block's state (free, used, cached, pinned, shared), its
// holder and fill, the sequences with their block counts, and a swap-out moving a sequence's
// blocks to the host tier, checked block by block on a scene built with exact block ids.
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve {
namespace kv_block_map_test {

using cache_test::Range;

KvCacheManagerConfig Config() {
  KvCacheManagerConfig c;
  c.num_blocks = 8;
  c.num_host_blocks = 4;
  c.test_hooks.verify_each_operation = true;
  return c;
}

KvSpec Spec() {
  KvSpecConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.block_size = 4;
  return *KvSpec::Create(c);
}

void Prefill(KvCacheManager& m, SeqId seq, const std::vector<int32_t>& tokens) {
  const int cached = m.AcquireCachedPrefix(seq, tokens, "");
  ASSERT_TRUE(m.AllocateSlots(seq, static_cast<int>(tokens.size()) - cached).has_value());
  m.CommitComputed(seq, tokens, static_cast<int>(tokens.size()), "");
}

using S = BlockState;

TEST(KvBlockMapTest, EachBlockHasItsStateHolderAndFill) {
  KvCacheManager m(Spec(), Config());
  Prefill(m, 1, Range(0, 9));  // blocks 0 1 2 (2 full + 1 token)
  std::vector<int32_t> b = Range(0, 8);
  for (int32_t t : {50, 51, 52}) b.push_back(t);
  Prefill(m, 2, b);  // shares 0 1 (prefix hit), owns 3 (3 tokens)
  Prefill(m, 3, Range(100, 4));  // block 4, published
  m.Free(3);                      // -> cached
  Prefill(m, 5, Range(200, 8));  // blocks 5 6
  ASSERT_EQ(m.PinPrefix(Range(200, 8), "").tokens, 8);
  m.Free(5);  // 5 6 stay, pinned

  const KvBlockMap map = m.BlockMap();
  EXPECT_EQ(map.block_size, 4);
  EXPECT_EQ(map.state, (std::vector<S>{S::kShared, S::kShared, S::kUsed, S::kUsed, S::kCached, S::kPinned,
                                       S::kPinned, S::kFree}));
  EXPECT_EQ(map.holder, (std::vector<int32_t>{0, 0, 0, 1, -1, -1, -1, -1}));
  EXPECT_EQ(map.fill, (std::vector<uint16_t>{4, 4, 1, 3, 4, 4, 4, 0}));
  ASSERT_EQ(map.seqs.size(), 2u);
  EXPECT_EQ(map.seqs[0].id, 1u);
  EXPECT_EQ(map.seqs[0].num_tokens, 9);
  EXPECT_EQ(map.seqs[0].num_blocks, 3);
  EXPECT_EQ(map.seqs[1].id, 2u);
  EXPECT_EQ(map.seqs[1].num_tokens, 11);
  EXPECT_EQ(map.seqs[1].num_blocks, 3);
  EXPECT_EQ(map.count(S::kFree), 1);
  EXPECT_EQ(map.count(S::kUsed), 2);
  EXPECT_EQ(map.count(S::kCached), 1);
  EXPECT_EQ(map.count(S::kPinned), 2);
  EXPECT_EQ(map.count(S::kShared), 2);
  // The counts agree with stats(), which folds shared into used.
  const KvCacheStats stats = m.stats();
  EXPECT_EQ(stats.used_blocks, map.count(S::kUsed) + map.count(S::kShared));
  EXPECT_EQ(stats.cached_blocks, map.count(S::kCached));
  EXPECT_EQ(stats.pinned_blocks, map.count(S::kPinned));
  EXPECT_EQ(stats.free_blocks, map.count(S::kFree));
}

TEST(KvBlockMapTest, ASwappedOutSequenceHoldsHostSlotsAndNoDeviceBlocks) {
  KvCacheManager m(Spec(), Config());
  Prefill(m, 1, Range(0, 9));
  std::vector<int32_t> b = Range(0, 8);
  for (int32_t t : {50, 51, 52}) b.push_back(t);
  Prefill(m, 2, b);
  ASSERT_TRUE(m.SwapOut(2).has_value());
  const KvBlockMap map = m.BlockMap();
  // Blocks 0 and 1 lose their second holder; 3 was private and partial: free, not cached.
  EXPECT_EQ(map.state, (std::vector<S>{S::kUsed, S::kUsed, S::kUsed, S::kFree, S::kFree, S::kFree, S::kFree,
                                       S::kFree}));
  EXPECT_EQ(map.holder, (std::vector<int32_t>{0, 0, 0, -1, -1, -1, -1, -1}));
  ASSERT_EQ(map.seqs.size(), 2u);
  EXPECT_TRUE(map.seqs[1].swapped);
  EXPECT_EQ(map.seqs[1].num_blocks, 0);
  EXPECT_EQ(map.seqs[1].num_host_blocks, 3);
  EXPECT_EQ(map.seqs[1].num_tokens, 11);
  EXPECT_EQ(map.host_total_blocks, 4);
  EXPECT_EQ(map.host_used_blocks, 3);
}

TEST(KvBlockMapTest, TheCompactionRegionFollowsTheMainOne) {
  KvCacheManager m(Spec(), cache_test::CompactConfig(8, 4, 4));
  ASSERT_NE(m.compact_spec(), nullptr);
  EXPECT_EQ(m.compact_spec()->dtype(0, 0), KvDtype::kInt8);
  ASSERT_TRUE(m.AllocateSlots(1, 18).has_value());  // blocks 0..4, the last holds 2 tokens
  ASSERT_EQ(m.Compact(1, 6).size(), 3u);            // 0 1 2 -> 8 9 10
  ASSERT_TRUE(m.AllocateSlots(2, 4).has_value());   // block 5 (0 1 2 went to the tail of the free list)
  const KvBlockMap map = m.BlockMap();
  EXPECT_EQ(map.num_blocks(), 8);
  EXPECT_EQ(map.num_compact_blocks, 4);
  EXPECT_EQ(map.state, (std::vector<S>{S::kFree, S::kFree, S::kFree, S::kUsed, S::kUsed, S::kUsed, S::kFree, S::kFree,
                                       S::kUsed, S::kUsed, S::kUsed, S::kFree}));
  EXPECT_EQ(map.holder, (std::vector<int32_t>{-1, -1, -1, 0, 0, 1, -1, -1, 0, 0, 0, -1}));
  EXPECT_EQ(map.fill, (std::vector<uint16_t>{0, 0, 0, 4, 2, 4, 0, 0, 4, 4, 4, 0}));
  EXPECT_EQ(map.count(S::kUsed), 3);
  EXPECT_EQ(map.count(S::kFree), 5);
  EXPECT_EQ(map.compact_counts[static_cast<size_t>(S::kUsed)], 3);
  EXPECT_EQ(map.compact_counts[static_cast<size_t>(S::kFree)], 1);
  const KvCacheStats stats = m.stats();
  EXPECT_EQ(stats.compact_used_blocks, 3);
  EXPECT_EQ(stats.used_blocks, map.count(S::kUsed) + map.count(S::kShared));
}

TEST(KvBlockMapTest, NoCompactionRegionWithoutCompaction) {
  KvCacheManager m(Spec(), Config());
  EXPECT_EQ(m.compact_spec(), nullptr);
  const KvBlockMap map = m.BlockMap();
  EXPECT_EQ(map.num_compact_blocks, 0);
  EXPECT_EQ(map.num_blocks(), 8);
  EXPECT_EQ(map.state.size(), 8u);
}

}  // namespace kv_block_map_test
}  // namespace kvserve
