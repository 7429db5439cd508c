// Randomized operation sequences on KvCacheManager (allocate, commit, prefix hits, fork, free,
// truncate, window eviction, swap, pins, compaction) with VerifyIntegrity after every operation, and a
// shadow "backend" that stores the token id written at every slot: every live sequence must
// read exactly its own tokens back, so no shared block was ever written and no prefix hit
// ever served another prefix — also with a weak hash that collides all the time.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "cache/kv_cache_manager.h"

namespace kvserve {
namespace kv_cache_integrity_test {

constexpr int kBlock = 4;
constexpr int kNumBlocks = 48;
constexpr int kHostBlocks = 24;
constexpr int kCompactBlocks = 16;

BlockHash WeakHash(const BlockHash&, std::span<const int32_t> tokens, std::string_view) {
  BlockHash h{};
  h[0] = static_cast<uint8_t>(tokens[0] % 3);
  return h;
}

// Token ids per slot, as a backend would hold K/V; host slots likewise.
struct ShadowCache {
  std::vector<int32_t> device = std::vector<int32_t>((kNumBlocks + kCompactBlocks) * kBlock, -1);
  std::vector<int32_t> host = std::vector<int32_t>(kHostBlocks * kBlock, -1);
  void Copy(const std::vector<std::pair<BlockId, BlockId>>& copies) {
    for (auto [src, dst] : copies) {
      std::copy_n(device.begin() + src * kBlock, kBlock, device.begin() + dst * kBlock);
    }
  }
};

struct LiveSeq {
  std::vector<int32_t> tokens;  // as cached (after window evictions)
  std::string salt;
  bool windowed = false;
};

class IntegrityFuzz : public ::testing::TestWithParam<bool> {};

TEST_P(IntegrityFuzz, RandomOperationsKeepEverythingConsistent) {
  KvSpecConfig sc;
  sc.num_layers = 1;
  sc.num_kv_heads = 1;
  sc.head_dim = 8;
  sc.block_size = kBlock;
  KvCacheManagerConfig cfg;
  cfg.num_blocks = kNumBlocks;
  cfg.num_host_blocks = kHostBlocks;
  cfg.num_compact_blocks = kCompactBlocks;
  KvSpecConfig compact = sc;
  compact.dtype = KvDtype::kInt8;
  cfg.compact_spec = *KvSpec::Create(compact);
  cfg.test_hooks.verify_each_operation = true;
  cfg.test_hooks.prefix_hash = GetParam() ? &WeakHash : nullptr;
  KvCacheManager m(*KvSpec::Create(sc), cfg);
  ShadowCache shadow;
  std::map<SeqId, LiveSeq> live;
  std::mt19937 rng(GetParam() ? 7 : 11);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const std::vector<std::vector<int32_t>> bases = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {1, 2, 3, 4, 9, 9, 9, 9}, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13}};
  const WindowPolicy window = WindowPolicy::Sliding(12, 4);
  std::vector<PinId> pins;
  SeqId next_id = 1;

  // Writes `seq`'s tokens at positions [from, to) into the shadow, then commits.
  auto compute = [&](SeqId id, int from) {
    LiveSeq& s = live[id];
    const BlockTable& t = m.table(id);
    for (int p = from; p < static_cast<int>(s.tokens.size()); ++p) {
      const BlockId b = t.blocks()[p / kBlock];
      shadow.device[b * kBlock + p % kBlock] = s.tokens[p];
    }
    m.CommitComputed(id, s.tokens, static_cast<int>(s.tokens.size()), s.salt);
  };
  auto random_live = [&](bool on_device) -> std::optional<SeqId> {
    std::vector<SeqId> ids;
    for (const auto& [id, s] : live) {
      if (!on_device || !m.IsSwapped(id)) ids.push_back(id);
    }
    if (ids.empty()) return std::nullopt;
    return ids[pick(static_cast<int>(ids.size()))];
  };

  for (int step = 0; step < 4000; ++step) {
    int op = pick(106);
    if (m.num_free_blocks() < 12 && op < 50) op = 60;  // under pressure: finish something
    if (op >= 100) {  // compaction of old context
      auto id = random_live(true);
      if (!id) continue;
      shadow.Copy(m.Compact(*id, pick(3) * kBlock));
    } else if (op < 22) {  // new request
      const SeqId id = next_id++;
      LiveSeq s;
      s.tokens = bases[pick(3)];
      s.tokens.resize(pick(static_cast<int>(s.tokens.size())) + 1);
      for (int i = pick(6); i > 0; --i) s.tokens.push_back(pick(20));
      s.salt = pick(4) == 0 ? "tenant" : "";
      const int hit = m.AcquireCachedPrefix(id, s.tokens, s.salt);
      if (!m.AllocateSlots(id, static_cast<int>(s.tokens.size()) - hit)) {
        m.Free(id);
        continue;
      }
      live[id] = s;
      compute(id, hit);
    } else if (op < 50) {  // decode one token
      auto id = random_live(true);
      if (!id) continue;
      LiveSeq& s = live[*id];
      if (s.windowed) {
        const auto ev = m.EvictForWindow(*id, window, 1);
        shadow.Copy(ev.copies);
        if (ev.evicted_tokens > 0) {
          s.tokens.erase(s.tokens.begin() + kBlock, s.tokens.begin() + kBlock + ev.evicted_tokens);
        }
      }
      if (!m.AllocateSlots(*id, 1)) continue;
      s.tokens.push_back(pick(20));
      compute(*id, static_cast<int>(s.tokens.size()) - 1);
    } else if (op < 58) {  // fork
      auto id = random_live(true);
      if (!id) continue;
      const SeqId child = next_id++;
      auto copies = m.Fork(*id, child);
      if (!copies) continue;
      shadow.Copy(*copies);
      live[child] = live[*id];
    } else if (op < 68) {  // finish
      auto id = random_live(false);
      if (!id) continue;
      if (pick(2) == 0) {
        m.Free(*id);
      } else {
        m.Free(*id, EvictionReason::kPreemption);
      }
      live.erase(*id);
    } else if (op < 74) {  // truncate (a chat turn diverged)
      auto id = random_live(true);
      if (!id) continue;
      LiveSeq& s = live[*id];
      const int keep = pick(static_cast<int>(s.tokens.size()) + 1);
      auto copies = m.Truncate(*id, keep);
      if (!copies) continue;
      shadow.Copy(*copies);
      s.tokens.resize(keep);
    } else if (op < 80) {  // becomes a windowed chat session
      auto id = random_live(true);
      if (!id) continue;
      LiveSeq& s = live[*id];
      if (static_cast<int>(s.tokens.size()) < kBlock) continue;  // sinks must be whole
      s.windowed = true;
      const auto ev = m.EvictForWindow(*id, window, pick(8));
      shadow.Copy(ev.copies);
      if (ev.evicted_tokens > 0) {
        s.tokens.erase(s.tokens.begin() + kBlock, s.tokens.begin() + kBlock + ev.evicted_tokens);
      }
    } else if (op < 88) {  // swap out
      auto id = random_live(true);
      if (!id) continue;
      auto plan = m.SwapOut(*id);
      if (!plan) continue;
      for (auto [b, slot] : plan->device_host) {
        std::copy_n(shadow.device.begin() + b * kBlock, kBlock, shadow.host.begin() + slot * kBlock);
      }
    } else if (op < 95) {  // swap in
      std::vector<SeqId> swapped;
      for (const auto& [id, s] : live) {
        if (m.IsSwapped(id)) swapped.push_back(id);
      }
      if (swapped.empty()) continue;
      const SeqId id = swapped[pick(static_cast<int>(swapped.size()))];
      auto plan = m.SwapIn(id);
      if (!plan) continue;
      for (auto [b, slot] : plan->device_host) {
        std::copy_n(shadow.host.begin() + slot * kBlock, kBlock, shadow.device.begin() + b * kBlock);
      }
    } else if (op < 99) {
      if (const PinId id = m.PinPrefix(bases[pick(3)], "").id; id != 0) pins.push_back(id);
    } else if (!pins.empty() && pick(2) == 0) {
      const size_t i = pick(static_cast<int>(pins.size()));
      ASSERT_TRUE(m.Unpin(pins[i]));
      pins.erase(pins.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      m.UnpinAll();
      pins.clear();
    }

    ASSERT_TRUE(m.VerifyIntegrity().ok()) << "step " << step << ": " << m.VerifyIntegrity().ToString();
    // Every sequence on the device reads back exactly its tokens.
    for (const auto& [id, s] : live) {
      if (m.IsSwapped(id)) continue;
      const BlockTable& t = m.table(id);
      ASSERT_EQ(t.num_tokens(), static_cast<int>(s.tokens.size())) << "step " << step;
      for (int p = 0; p < t.num_tokens(); ++p) {
        ASSERT_EQ(shadow.device[t.blocks()[p / kBlock] * kBlock + p % kBlock], s.tokens[p])
            << "step " << step << " seq " << id << " position " << p;
      }
    }
  }
  const KvCacheStats st = m.stats();
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_GT(st.swapped_in_blocks, 0);
  EXPECT_GT(st.evicted_blocks[static_cast<int>(EvictionReason::kWindow)], 0);
  EXPECT_GT(st.evicted_blocks[static_cast<int>(EvictionReason::kPrefixLru)], 0);
  EXPECT_GT(st.compacted_blocks, 0);
  for (const auto& [id, s] : live) m.Free(id);
  m.UnpinAll();
  EXPECT_EQ(m.num_free_blocks(), kNumBlocks);
  EXPECT_EQ(m.num_free_compact_blocks(), kCompactBlocks);
  EXPECT_EQ(m.stats().host_used_blocks, 0);
  EXPECT_TRUE(m.VerifyIntegrity().ok());
}

INSTANTIATE_TEST_SUITE_P(Hash, IntegrityFuzz, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "WeakHash" : "Sha256"; });

}  // namespace kv_cache_integrity_test
}  // namespace kvserve
