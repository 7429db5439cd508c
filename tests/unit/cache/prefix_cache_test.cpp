// Prefix sharing in KvCacheManager: exact block ids shared, salts isolate tenants, forced
// hash collisions cost a miss, partial blocks never shared, fork copy-on-write, LRU eviction
// order of cached blocks, pins survive pressure.
#include <gtest/gtest.h>

#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve {
namespace prefix_cache_test {

using cache_test::Blocks;
using cache_test::Range;

constexpr int kBlock = 4;

KvSpec SmallSpec() {
  KvSpecConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.block_size = kBlock;
  return *KvSpec::Create(c);
}

KvCacheManagerConfig Config(int num_blocks, PrefixHashFn hash = nullptr) {
  KvCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.test_hooks.verify_each_operation = true;
  c.test_hooks.prefix_hash = hash;
  return c;
}

// Runs a request the way the engine does: prefix lookup, allocate the rest, commit all.
std::vector<BlockId> Prefill(KvCacheManager& m, SeqId seq, const std::vector<int32_t>& tokens,
                             std::string_view salt = "", int* hit = nullptr) {
  const int cached = m.AcquireCachedPrefix(seq, tokens, salt);
  if (hit != nullptr) *hit = cached;
  EXPECT_TRUE(m.AllocateSlots(seq, static_cast<int>(tokens.size()) - cached).has_value());
  m.CommitComputed(seq, tokens, static_cast<int>(tokens.size()), salt);
  EXPECT_TRUE(m.VerifyIntegrity().ok()) << m.VerifyIntegrity().ToString();
  return Blocks(m, seq);
}

// Weak hash for collision tests: only the block's first token counts.
BlockHash FirstTokenHash(const BlockHash&, std::span<const int32_t> tokens, std::string_view) {
  BlockHash h{};
  h[0] = static_cast<uint8_t>(tokens[0]);
  return h;
}

TEST(PrefixCache, IdenticalPromptsShareExactBlockIds) {
  KvCacheManager m(SmallSpec(), Config(16));
  const auto prompt = Range(100, 10);  // blocks [100..103] [104..107] + 2 tokens
  int hit = -1;
  EXPECT_EQ(Prefill(m, 1, prompt, "", &hit), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(Prefill(m, 2, prompt, "", &hit), (std::vector<BlockId>{0, 1, 3}));
  EXPECT_EQ(hit, 8);
  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.prefix_queries, 2);
  EXPECT_EQ(st.prefix_hits, 1);
  EXPECT_EQ(st.prefix_query_tokens, 20);
  EXPECT_EQ(st.prefix_hit_tokens, 8);
  EXPECT_EQ(st.used_blocks, 4);  // 0, 1 shared; 2 and 3 private
  // A finished request's blocks stay cached and serve the next identical prompt.
  m.Free(1);
  m.Free(2);
  EXPECT_EQ(m.stats().cached_blocks, 2);
  EXPECT_EQ(Prefill(m, 3, prompt, "", &hit), (std::vector<BlockId>{0, 1, 4}));
  EXPECT_EQ(hit, 8);
}

TEST(PrefixCache, NeverCoversTheWholePrompt) {
  KvCacheManager m(SmallSpec(), Config(16));
  const auto prompt = Range(7, 8);  // exactly two blocks
  Prefill(m, 1, prompt);
  EXPECT_EQ(m.AcquireCachedPrefix(2, prompt, ""), 4);  // one block: a token is left to compute
  EXPECT_EQ(Blocks(m, 2), (std::vector<BlockId>{0}));
  EXPECT_EQ(m.table(2).num_tokens(), 4);
}

TEST(PrefixCache, DifferentSaltsNeverShare) {
  KvCacheManager m(SmallSpec(), Config(16));
  const auto prompt = Range(100, 9);
  int hit = -1;
  EXPECT_EQ(Prefill(m, 1, prompt, "tenant-a", &hit), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(Prefill(m, 2, prompt, "tenant-b", &hit), (std::vector<BlockId>{3, 4, 5}));
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(Prefill(m, 3, prompt, "", &hit), (std::vector<BlockId>{6, 7, 8}));
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(Prefill(m, 4, prompt, "tenant-b", &hit), (std::vector<BlockId>{3, 4, 9}));
  EXPECT_EQ(hit, 8);
}

TEST(PrefixCache, ForcedCollisionIsDetectedByComparingTokens) {
  KvCacheManager m(SmallSpec(), Config(32, &FirstTokenHash));
  const std::vector<int32_t> a = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  const std::vector<int32_t> b = {5, 6, 7, 99, 9, 10, 11, 12, 13};  // block 0 collides with a's
  int hit = -1;
  EXPECT_EQ(Prefill(m, 1, a, "", &hit), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(Prefill(m, 2, b, "", &hit), (std::vector<BlockId>{3, 4, 5}));
  EXPECT_EQ(hit, 0);  // same hash, different tokens: a miss, never a's data
  // b's blocks could not be published under the taken hash; a still hits in full.
  EXPECT_EQ(Prefill(m, 3, a, "", &hit), (std::vector<BlockId>{0, 1, 6}));
  EXPECT_EQ(hit, 8);
  EXPECT_EQ(Prefill(m, 4, b, "", &hit), (std::vector<BlockId>{7, 8, 9}));
  EXPECT_EQ(hit, 0);
}

TEST(PrefixCache, ForcedCollisionWithDifferentParentOrSaltIsAMiss) {
  KvCacheManager m(SmallSpec(), Config(32, &FirstTokenHash));
  const std::vector<int32_t> e = {1, 1, 1, 1, 9, 10, 11, 12, 0};
  const std::vector<int32_t> f = {2, 2, 2, 2, 9, 10, 11, 12, 0};  // same 2nd block, other parent
  int hit = -1;
  Prefill(m, 1, e, "", &hit);  // blocks 0, 1, 2
  EXPECT_EQ(Prefill(m, 2, f, "", &hit), (std::vector<BlockId>{3, 4, 5}));
  EXPECT_EQ(hit, 0);
  // f's first block is cached; its second block's hash finds e's block 1, whose tokens are
  // equal but whose parent is e's block 0: only f's first block is reused.
  EXPECT_EQ(Prefill(m, 3, f, "", &hit), (std::vector<BlockId>{3, 6, 7}));
  EXPECT_EQ(hit, 4);
  // The weak hash ignores the salt; the stored salt does not.
  EXPECT_EQ(Prefill(m, 4, e, "other", &hit), (std::vector<BlockId>{8, 9, 10}));
  EXPECT_EQ(hit, 0);
}

TEST(PrefixCache, PartiallyFilledLastBlockIsNeverShared) {
  KvCacheManager m(SmallSpec(), Config(16));
  const auto prompt = Range(1, 10);
  Prefill(m, 1, prompt);  // blocks 0, 1 full; 2 holds 2 tokens
  auto longer = prompt;
  longer.push_back(50);
  longer.push_back(51);
  longer.push_back(52);
  int hit = -1;
  EXPECT_EQ(Prefill(m, 2, longer, "", &hit), (std::vector<BlockId>{0, 1, 3, 4}));
  EXPECT_EQ(hit, 8);
  m.Free(1);
  m.Free(2);
  // Cached: 0, 1 (seq 1's full blocks) and 3 (seq 2's third block, full); 2 and 4 were partial.
  EXPECT_EQ(m.stats().cached_blocks, 3);
  EXPECT_EQ(m.stats().free_blocks, 13);
}

TEST(PrefixCache, ForkSharesFullBlocksAndCopiesThePartialOne) {
  KvCacheManager m(SmallSpec(), Config(8));
  Prefill(m, 1, Range(1, 10));  // blocks 0, 1, 2 (2 tokens in block 2)
  auto copies = m.Fork(1, 2);
  ASSERT_TRUE(copies.has_value());
  EXPECT_EQ(*copies, (std::vector<std::pair<BlockId, BlockId>>{{2, 3}}));
  EXPECT_EQ(Blocks(m, 2), (std::vector<BlockId>{0, 1, 3}));
  EXPECT_EQ(m.table(2).num_tokens(), 10);
  // Both append privately.
  EXPECT_EQ(*m.AllocateSlots(1, 3), (std::vector<BlockId>{4}));
  EXPECT_EQ(*m.AllocateSlots(2, 2), std::vector<BlockId>{});
  // A full last block is shared outright.
  Prefill(m, 3, Range(40, 8));  // blocks 5, 6
  copies = m.Fork(3, 4);
  ASSERT_TRUE(copies.has_value());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(Blocks(m, 4), (std::vector<BlockId>{5, 6}));
  EXPECT_EQ(*m.AllocateSlots(4, 1), (std::vector<BlockId>{7}));
  // No block left for a copy: nothing changes.
  EXPECT_EQ(m.num_free_blocks(), 0);
  EXPECT_FALSE(m.Fork(1, 5).has_value());  // seq 1's last block is partial
  EXPECT_FALSE(m.Contains(5));
  EXPECT_EQ(m.stats().used_blocks, 8);
}

TEST(PrefixCache, CachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  KvCacheManager m(SmallSpec(), Config(6));
  const auto a = Range(10, 9), b = Range(30, 9);
  Prefill(m, 1, a);  // 0, 1 indexed, 2 partial
  m.Free(1);         // free list: 3 4 5 2 1 0
  Prefill(m, 2, b);  // takes 3, 4, 5; indexes 3, 4
  m.Free(2);         // free list: 2 1 0 5 4 3
  KvCacheStats st = m.stats();
  EXPECT_EQ(st.cached_blocks, 4);
  EXPECT_EQ(st.evicted_blocks[static_cast<int>(EvictionReason::kPrefixLru)], 0);
  // Four new blocks: 2 (never indexed), then a's blocks 1 and 0, then 5.
  EXPECT_EQ(*m.AllocateSlots(3, 16), (std::vector<BlockId>{2, 1, 0, 5}));
  EXPECT_EQ(m.stats().evicted_blocks[static_cast<int>(EvictionReason::kPrefixLru)], 2);
  EXPECT_EQ(m.AcquireCachedPrefix(4, a, ""), 0);
  EXPECT_EQ(m.AcquireCachedPrefix(5, b, ""), 8);  // b's blocks 3, 4 survive
  m.Free(5);                                      // free list: 4 3
  EXPECT_EQ(*m.AllocateSlots(3, 4), (std::vector<BlockId>{4}));
  EXPECT_EQ(m.stats().evicted_blocks[static_cast<int>(EvictionReason::kPrefixLru)], 3);
  EXPECT_EQ(m.AcquireCachedPrefix(6, b, ""), 4);  // block 3 only
}

TEST(PrefixCache, AHitMovesBlocksToTheRecentEndOfTheLru) {
  KvCacheManager m(SmallSpec(), Config(6));
  const auto a = Range(10, 9), b = Range(30, 9);
  Prefill(m, 1, a);  // 0 1 2
  Prefill(m, 2, b);  // 3 4 5
  m.Free(1);         // free list: 2 1 0
  m.Free(2);         // free list: 2 1 0 5 4 3
  EXPECT_EQ(m.AcquireCachedPrefix(3, a, ""), 8);
  m.Free(3);  // a's blocks were used last: free list 2 5 4 3 1 0
  EXPECT_EQ(*m.AllocateSlots(4, 12), (std::vector<BlockId>{2, 5, 4}));
  EXPECT_EQ(m.AcquireCachedPrefix(5, a, ""), 8);
  EXPECT_EQ(m.AcquireCachedPrefix(6, b, ""), 4);  // b's block 3 is still cached, 4 is gone
}

TEST(PrefixCache, PinnedPrefixSurvivesPressure) {
  KvCacheManager m(SmallSpec(), Config(6));
  const auto system = Range(200, 9);
  Prefill(m, 1, system);
  const KvCacheManager::Pin first = m.PinPrefix(system, "");
  EXPECT_EQ(first.tokens, 8);
  EXPECT_EQ(first.blocks, 2);
  // A second pin of the same prefix holds the same blocks once more; releasing one keeps them.
  const KvCacheManager::Pin second = m.PinPrefix(system, "");
  EXPECT_EQ(second.tokens, 8);
  EXPECT_NE(second.id, first.id);
  EXPECT_EQ(m.num_pinned_blocks(), 2);
  EXPECT_TRUE(m.Unpin(second.id));
  EXPECT_FALSE(m.Unpin(second.id));
  EXPECT_EQ(m.num_pinned_blocks(), 2);
  EXPECT_EQ(m.PinPrefix(Range(900, 9), "").id, 0);  // nothing cached: no pin
  EXPECT_EQ(m.PinPrefix(system, "other salt").tokens, 0);
  m.Free(1);
  KvCacheStats st = m.stats();
  EXPECT_EQ(st.pinned_blocks, 2);
  EXPECT_EQ(st.free_blocks, 4);
  EXPECT_EQ(m.num_free_blocks(), 4);
  // Everything else is taken; the pinned blocks are never handed out.
  EXPECT_EQ(*m.AllocateSlots(2, 16), (std::vector<BlockId>{3, 4, 5, 2}));
  EXPECT_FALSE(m.AllocateSlots(3, 1).has_value());
  EXPECT_EQ(m.AcquireCachedPrefix(4, system, ""), 8);
  EXPECT_EQ(Blocks(m, 4), (std::vector<BlockId>{0, 1}));
  m.Free(4);
  m.UnpinAll();
  st = m.stats();
  EXPECT_EQ(st.pinned_blocks, 0);
  EXPECT_EQ(st.cached_blocks, 2);
  EXPECT_EQ(*m.AllocateSlots(3, 4), (std::vector<BlockId>{0}));  // unpinned in id order
}

TEST(PrefixCache, DisabledCachingNeverShares) {
  KvCacheManagerConfig c = Config(8);
  c.enable_prefix_caching = false;
  KvCacheManager m(SmallSpec(), c);
  const auto p = Range(1, 9);
  Prefill(m, 1, p);
  int hit = -1;
  EXPECT_EQ(Prefill(m, 2, p, "", &hit), (std::vector<BlockId>{3, 4, 5}));
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(m.PinPrefix(p, "").tokens, 0);
  EXPECT_EQ(m.stats().prefix_queries, 0);
}

TEST(PrefixCache, CommitIsIncrementalAcrossDecodeSteps) {
  KvCacheManager m(SmallSpec(), Config(8));
  std::vector<int32_t> tokens = Range(1, 3);
  ASSERT_TRUE(m.AllocateSlots(1, 3).has_value());
  m.CommitComputed(1, tokens, 3, "");
  for (int32_t t = 4; t <= 9; ++t) {  // decode: one token per step
    tokens.push_back(t);
    ASSERT_TRUE(m.AllocateSlots(1, 1).has_value());
    m.CommitComputed(1, tokens, static_cast<int>(tokens.size()), "");
  }
  EXPECT_EQ(m.AcquireCachedPrefix(2, Range(1, 12), ""), 8);
}


// KV events: each published block once, with its parent, tokens and salt (a shared prefix and
// a duplicate publish add nothing); each forgotten one once, in order; none while off.
TEST(PrefixCache, PrefixEventsRecordStoredAndRemovedBlocksInOrder) {
  KvCacheManager m(SmallSpec(), Config(6));
  Prefill(m, 1, Range(10, 9), "s");  // nothing recorded yet
  EXPECT_TRUE(m.TakePrefixEvents().empty());
  m.Free(1);
  m.set_record_prefix_events(true);
  const auto a = Range(30, 9);
  Prefill(m, 2, a, "t");  // takes 3, 4, 5: publishes 3 (root) and 4 (after 3)
  Prefill(m, 3, a, "t");  // a hit on 3 and 4: nothing new
  std::vector<PrefixEvent> ev = m.TakePrefixEvents();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, PrefixEvent::Kind::kStored);
  EXPECT_EQ(ev[0].block.block, 3);
  EXPECT_EQ(ev[0].parent, kPrefixRoot);
  EXPECT_EQ(ev[0].tokens, Range(30, 4));
  EXPECT_EQ(ev[0].salt, "t");
  EXPECT_EQ(ev[1].block.block, 4);
  EXPECT_EQ(ev[1].parent, ev[0].block);
  EXPECT_EQ(ev[1].tokens, Range(34, 4));
  EXPECT_TRUE(m.TakePrefixEvents().empty());  // handed over once
  m.Free(2);
  m.Free(3);
  // New blocks evict the oldest cached ones (sequence 1's blocks 0 and 1, then 3).
  ASSERT_TRUE(m.AllocateSlots(4, 24).has_value());
  ev = m.TakePrefixEvents();
  ASSERT_GE(ev.size(), 3u);
  for (const PrefixEvent& e : ev) EXPECT_EQ(e.kind, PrefixEvent::Kind::kRemoved);
  EXPECT_EQ(ev[0].block.block, 1);
  EXPECT_EQ(ev[1].block.block, 0);
}

}  // namespace prefix_cache_test
}  // namespace kvserve
