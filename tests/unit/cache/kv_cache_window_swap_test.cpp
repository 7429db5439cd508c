// KvCacheManager bookkeeping for sliding-window eviction, truncation, the host tier and stats:
// exact block ids, token counts and counters.
#include <gtest/gtest.h>

#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve {
namespace kv_cache_window_swap_test {

using cache_test::Blocks;
using cache_test::Range;

constexpr int kBlock = 4;

KvSpec Spec(KvDtype dtype = KvDtype::kF16) {
  KvSpecConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.block_size = kBlock;
  c.dtype = dtype;
  return *KvSpec::Create(c);
}

KvCacheManagerConfig Config(int num_blocks, int host_blocks = 0) {
  KvCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.num_host_blocks = host_blocks;
  c.test_hooks.verify_each_operation = true;
  return c;
}

int64_t Evicted(const KvCacheManager& m, EvictionReason r) { return m.stats().evicted_blocks[static_cast<int>(r)]; }

TEST(WindowEviction, RemovesBlocksAfterTheSinksAndReportsTheShift) {
  KvCacheManager m(Spec(), Config(16));
  ASSERT_TRUE(m.AllocateSlots(1, 16).has_value());  // blocks 0 1 2 3, full
  const WindowPolicy policy = WindowPolicy::Sliding(16, 4);
  // 16 + 1 > 16: one block over; a quarter of the window is one block too.
  const auto ev = m.EvictForWindow(1, policy, 1);
  EXPECT_EQ(ev.evicted_tokens, 4);
  EXPECT_EQ(ev.shifted_blocks, (std::vector<BlockId>{2, 3}));
  EXPECT_TRUE(ev.copies.empty());
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 2, 3}));
  EXPECT_EQ(m.table(1).num_tokens(), 12);
  EXPECT_EQ(Evicted(m, EvictionReason::kWindow), 1);
  EXPECT_EQ(m.num_free_blocks(), 13);
  // Room again: nothing to do.
  const auto none = m.EvictForWindow(1, policy, 4);
  EXPECT_EQ(none.evicted_tokens, 0);
  EXPECT_TRUE(none.shifted_blocks.empty());
}

TEST(WindowEviction, EvictsAtLeastAQuarterOfTheWindowAndKeepsThePartialBlock) {
  KvCacheManager m(Spec(), Config(16));
  ASSERT_TRUE(m.AllocateSlots(1, 30).has_value());  // blocks 0..7, block 7 holds 2 tokens
  // 30 + 4 - 32 = 2 over (one block), but a quarter of 32 tokens is 2 blocks.
  const auto ev = m.EvictForWindow(1, WindowPolicy::Sliding(32, 4), 4);
  EXPECT_EQ(ev.evicted_tokens, 8);
  EXPECT_EQ(ev.shifted_blocks, (std::vector<BlockId>{3, 4, 5, 6, 7}));
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.table(1).num_tokens(), 22);
  // Freed last-first: block 2 before block 1.
  EXPECT_EQ(*m.AllocateSlots(2, 4 * 10), (std::vector<BlockId>{8, 9, 10, 11, 12, 13, 14, 15, 2, 1}));
}

TEST(WindowEviction, SinksRoundUpToWholeBlocksAndPartialBlockIsNeverEvicted) {
  KvCacheManager m(Spec(), Config(16));
  ASSERT_TRUE(m.AllocateSlots(1, 19).has_value());  // 0..4, block 4 holds 3 tokens
  // Sinks 5 tokens -> 2 blocks. 19 + 20 - 24 = 15 over -> 4 blocks wanted, only 2 full
  // blocks (2, 3) follow the sinks.
  const auto ev = m.EvictForWindow(1, WindowPolicy::Sliding(24, 5), 20);
  EXPECT_EQ(ev.evicted_tokens, 8);
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 1, 4}));
  EXPECT_EQ(ev.shifted_blocks, (std::vector<BlockId>{4}));
  EXPECT_EQ(m.table(1).num_tokens(), 11);
  EXPECT_EQ(Evicted(m, EvictionReason::kWindow), 2);
}

TEST(WindowEviction, FullPolicyIsANoOp) {
  KvCacheManager m(Spec(), Config(4));
  ASSERT_TRUE(m.AllocateSlots(1, 16).has_value());
  const auto ev = m.EvictForWindow(1, WindowPolicy::Full(), 100);
  EXPECT_EQ(ev.evicted_tokens, 0);
  EXPECT_EQ(m.table(1).num_tokens(), 16);
}

TEST(WindowEviction, SharedKeptBlocksGetPrivateCopiesAndAreNotPublished) {
  KvCacheManager m(Spec(), Config(16));
  const auto system = Range(100, 17);
  ASSERT_TRUE(m.AllocateSlots(1, 17).has_value());  // 0..4
  m.CommitComputed(1, system, 17, "");              // 0..3 indexed
  // A chat session starts from the shared prompt.
  ASSERT_EQ(m.AcquireCachedPrefix(2, system, ""), 16);
  ASSERT_TRUE(m.AllocateSlots(2, 1).has_value());   // block 5
  EXPECT_EQ(Blocks(m, 2), (std::vector<BlockId>{0, 1, 2, 3, 5}));
  // Window 20, sinks 4: 17 + 4 - 20 = 1 over -> max(1, ceil(5 / 4) = 2) = 2 blocks (1, 2).
  const auto ev = m.EvictForWindow(2, WindowPolicy::Sliding(20, 4), 4);
  EXPECT_EQ(ev.evicted_tokens, 8);
  // Block 3 is shared with sequence 1: it is copied to 6 before its keys move.
  EXPECT_EQ(ev.copies, (std::vector<std::pair<BlockId, BlockId>>{{3, 6}}));
  EXPECT_EQ(ev.shifted_blocks, (std::vector<BlockId>{6, 5}));
  EXPECT_EQ(Blocks(m, 2), (std::vector<BlockId>{0, 6, 5}));
  // Sequence 1 still sees its prompt intact, and the session publishes nothing new.
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 1, 2, 3, 4}));
  std::vector<int32_t> cached = Range(100, 4);
  for (int32_t t : Range(112, 5)) cached.push_back(t);
  m.CommitComputed(2, cached, 9, "");
  m.Free(1);
  EXPECT_EQ(m.stats().cached_blocks, 3);  // 1, 2, 3 (0 is held by the session)
}

TEST(WindowEviction, EvictsFurtherWhenCopiesDoNotFit) {
  KvCacheManager m(Spec(), Config(6));
  const auto p = Range(1, 17);
  ASSERT_TRUE(m.AllocateSlots(1, 17).has_value());  // 0..4
  m.CommitComputed(1, p, 17, "");
  ASSERT_EQ(m.AcquireCachedPrefix(2, p, ""), 16);   // shares 0..3
  ASSERT_TRUE(m.AllocateSlots(2, 1).has_value());   // block 5; pool now full
  // 17 + 4 - 20 = 1 over -> 2 blocks (1, 2), both shared, so nothing is freed and shared
  // block 3 cannot be copied: block 3 is evicted as well.
  const auto ev = m.EvictForWindow(2, WindowPolicy::Sliding(20, 4), 4);
  EXPECT_EQ(ev.evicted_tokens, 12);
  EXPECT_TRUE(ev.copies.empty());
  EXPECT_EQ(Blocks(m, 2), (std::vector<BlockId>{0, 5}));
  EXPECT_EQ(ev.shifted_blocks, (std::vector<BlockId>{5}));
}

TEST(Truncate, ReleasesWholeBlocksAndCopiesASharedPartialBlock) {
  KvCacheManager m(Spec(), Config(10));
  const auto p = Range(1, 14);
  ASSERT_TRUE(m.AllocateSlots(1, 14).has_value());  // 0..3
  m.CommitComputed(1, p, 14, "");                   // 0, 1, 2 indexed
  // Own blocks only: keep 6 tokens -> blocks 0, 1; block 1 becomes writable (unpublished).
  auto copies = m.Truncate(1, 6);
  ASSERT_TRUE(copies.has_value());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(m.table(1).num_tokens(), 6);
  EXPECT_EQ(*m.AllocateSlots(1, 2), std::vector<BlockId>{});  // writes into block 1 again
  EXPECT_EQ(m.AcquireCachedPrefix(9, p, ""), 4);               // only block 0 still indexed
  m.Free(9);
  // Shared partial block: a private copy.
  ASSERT_TRUE(m.AllocateSlots(2, 10).has_value());
  m.CommitComputed(2, Range(50, 10), 10, "");
  ASSERT_EQ(m.AcquireCachedPrefix(3, Range(50, 10), ""), 8);
  const std::vector<BlockId> before = Blocks(m, 3);
  copies = m.Truncate(3, 5);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].first, before[1]);
  EXPECT_EQ(Blocks(m, 3), (std::vector<BlockId>{before[0], (*copies)[0].second}));
  EXPECT_EQ(m.table(3).num_tokens(), 5);
  EXPECT_EQ(m.Truncate(3, 0)->size(), 0u);
  EXPECT_EQ(m.table(3).num_blocks(), 0);
}

TEST(HostTier, SwapOutAndInPlansAndCounters) {
  KvCacheManager m(Spec(), Config(8, 4));
  ASSERT_TRUE(m.AllocateSlots(1, 10).has_value());  // 0 1 2
  auto out = m.SwapOut(1);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->device_host, (std::vector<std::pair<BlockId, int32_t>>{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_TRUE(m.IsSwapped(1));
  EXPECT_TRUE(m.Contains(1));
  EXPECT_EQ(m.num_free_blocks(), 8);
  KvCacheStats st = m.stats();
  EXPECT_EQ(st.host_total_blocks, 4);
  EXPECT_EQ(st.host_used_blocks, 3);
  EXPECT_EQ(st.swapped_out_blocks, 3);
  EXPECT_EQ(st.tokens_stored, 10);
  // Not enough host room for a second sequence of 2 blocks.
  ASSERT_TRUE(m.AllocateSlots(2, 8).has_value());  // takes 3 4
  EXPECT_FALSE(m.SwapOut(2).has_value());
  EXPECT_FALSE(m.IsSwapped(2));
  // Back in: fresh device blocks in LRU order.
  auto in = m.SwapIn(1);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->device_host, (std::vector<std::pair<BlockId, int32_t>>{{5, 0}, {6, 1}, {7, 2}}));
  EXPECT_EQ(Blocks(m, 1), (std::vector<BlockId>{5, 6, 7}));
  EXPECT_EQ(m.table(1).num_tokens(), 10);
  st = m.stats();
  EXPECT_EQ(st.host_used_blocks, 0);
  EXPECT_EQ(st.swapped_in_blocks, 3);
  // Pool too full to swap back in: nothing changes.
  ASSERT_TRUE(m.SwapOut(1).has_value());  // host slots 3 0 1
  ASSERT_TRUE(m.AllocateSlots(3, 4 * 5).has_value());
  EXPECT_FALSE(m.SwapIn(1).has_value());
  EXPECT_TRUE(m.IsSwapped(1));
  m.Free(1);  // a swapped sequence returns its host slots
  EXPECT_EQ(m.stats().host_used_blocks, 0);
  EXPECT_FALSE(m.Contains(1));
}

TEST(HostTier, OffMeansNoSwap) {
  KvCacheManager m(Spec(), Config(4));
  ASSERT_TRUE(m.AllocateSlots(1, 4).has_value());
  EXPECT_FALSE(m.SwapOut(1).has_value());
}

TEST(KvCacheStats, EveryBlockInExactlyOneStateAndBytesByDtype) {
  KvSpecConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.block_size = kBlock;
  c.dtype = KvDtype::kInt8;
  c.keep = {{0, -1}};
  const KvSpec spec = *KvSpec::Create(c);
  KvCacheManager m(spec, Config(10));
  const auto p = Range(1, 9);
  ASSERT_TRUE(m.AllocateSlots(1, 9).has_value());  // 0 1 2
  m.CommitComputed(1, p, 9, "");
  EXPECT_EQ(m.PinPrefix(p, "").tokens, 8);
  ASSERT_TRUE(m.AllocateSlots(2, 4).has_value());  // 3
  ASSERT_TRUE(m.AllocateSlots(3, 4).has_value());  // 4
  m.CommitComputed(3, Range(70, 4), 4, "");
  m.Free(3);
  m.Free(1, EvictionReason::kPreemption);
  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.total_blocks, 10);
  EXPECT_EQ(st.pinned_blocks, 2);
  EXPECT_EQ(st.used_blocks, 1);
  EXPECT_EQ(st.cached_blocks, 1);
  EXPECT_EQ(st.free_blocks, 6);
  EXPECT_DOUBLE_EQ(st.usage_ratio, 0.3);
  EXPECT_EQ(st.tokens_stored, 4);
  EXPECT_EQ(st.block_size, kBlock);
  EXPECT_EQ(st.evicted_blocks[static_cast<int>(EvictionReason::kPreemption)], 3);
  // Layer 0 at f16: 2 (K,V) x 2 heads x 4 rows x 32 bytes = 512; layer 1 int8: 4 segments of
  // 4 x 16 data + 4 x 2 scales = 72 -> 96 with 32-byte alignment.
  EXPECT_EQ(st.block_bytes, 512 + 4 * 96);
  EXPECT_EQ(st.bytes_by_dtype.at("f16"), 512 * 10);
  EXPECT_EQ(st.bytes_by_dtype.at("int8"), 4 * 96 * 10);
  EXPECT_EQ(m.num_used_blocks(), 3);
  EXPECT_EQ(m.num_free_blocks(), 7);
}

TEST(KvCacheManager, RenameMovesTheTable) {
  KvCacheManager m(Spec(), Config(4));
  ASSERT_TRUE(m.AllocateSlots(1, 5).has_value());
  m.Rename(1, 7);
  EXPECT_FALSE(m.Contains(1));
  EXPECT_EQ(Blocks(m, 7), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(m.num_sequences(), 1);
}

}  // namespace kv_cache_window_swap_test
}  // namespace kvserve
