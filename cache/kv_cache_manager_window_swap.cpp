// KvCacheManager: sliding-window eviction (StreamingLLM: sinks + recent blocks, re-indexed)
// and the host offload tier (swap out / swap in plans). See kv_cache_manager.h.
#include <algorithm>

#include "cache/kv_cache_manager.h"
#include "cache/kv_cache_manager_impl.h"

namespace kvserve {

KvCacheManager::WindowEviction KvCacheManager::EvictForWindow(SeqId seq, const WindowPolicy& policy,
                                                              int num_new_tokens) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is swapped out";
  CHECK_GE(num_new_tokens, 0);
  WindowEviction out;
  if (!policy.sliding()) return out;
  const int bs = block_size();
  const int sink_blocks = (std::max(policy.sink_tokens, 0) + bs - 1) / bs;
  CHECK_GT(policy.window_tokens, (sink_blocks + 1) * bs)
      << "window of " << policy.window_tokens << " tokens cannot hold " << sink_blocks << " sink blocks and one more";
  s.windowed = true;
  const int num_tokens = s.table.num_tokens();
  const int excess = num_tokens + num_new_tokens - policy.window_tokens;
  if (excess <= 0) return out;

  auto& blocks = s.table.mutable_blocks();
  const int evictable = std::max(0, num_tokens / bs - sink_blocks);  // full blocks after the sinks
  const int quarter_blocks = (policy.window_tokens / 4 + bs - 1) / bs;
  int evict = std::min(std::max((excess + bs - 1) / bs, quarter_blocks), evictable);
  if (evict == 0) return out;
  // Kept blocks after the evicted run get their keys rotated: shared ones need private
  // copies. When those do not fit, evict further (each step frees a block or drops a copy).
  auto copies_needed = [&](int e) {
    int n = 0;
    for (int i = sink_blocks + e; i < static_cast<int>(blocks.size()); ++i) n += m.pool.ref_count(blocks[i]) > 1;
    return n;
  };
  auto blocks_freed = [&](int e) {
    int n = 0;
    for (int i = sink_blocks; i < sink_blocks + e; ++i) {
      n += m.pool.ref_count(blocks[i]) == 1 && !m.pool.is_compact(blocks[i]);
    }
    return n;
  };
  while (evict < evictable && copies_needed(evict) > m.pool.num_free() + blocks_freed(evict)) ++evict;

  // Remove the evicted run (tail of the run first, as Free does).
  for (int i = sink_blocks + evict - 1; i >= sink_blocks; --i) m.pool.Release(blocks[i]);
  blocks.erase(blocks.begin() + sink_blocks, blocks.begin() + sink_blocks + evict);
  m.evicted_blocks[static_cast<int>(EvictionReason::kWindow)] += evict;
  out.evicted_tokens = evict * bs;
  s.table.set_num_tokens(num_tokens - out.evicted_tokens);
  if (static_cast<int>(s.chain.size()) > sink_blocks) s.chain.resize(sink_blocks);

  for (int i = sink_blocks; i < static_cast<int>(blocks.size()); ++i) {
    const BlockId b = blocks[i];
    if (m.pool.ref_count(b) > 1) {
      const std::optional<BlockId> copy = m.TakeBlock();
      CHECK(copy.has_value()) << "window eviction planned a copy that does not fit";
      out.copies.emplace_back(b, *copy);
      blocks[i] = *copy;
      m.pool.Release(b);
    } else if (m.index.indexed(b)) {
      m.index.Remove(b);  // ours alone: its contents are about to change
    }
    out.shifted_blocks.push_back(blocks[i]);
  }
  m.MaybeVerify();
  return out;
}

std::optional<KvCacheManager::SwapPlan> KvCacheManager::SwapOut(SeqId seq) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is already swapped out";
  if (m.host.num_slots() == 0) return std::nullopt;
  const auto blocks = s.table.blocks();
  std::optional<std::vector<int32_t>> slots = m.host.Allocate(static_cast<int>(blocks.size()));
  if (!slots) return std::nullopt;
  SwapPlan plan;
  std::vector<char> compact;
  for (size_t i = 0; i < blocks.size(); ++i) {
    plan.device_host.emplace_back(blocks[i], (*slots)[i]);
    compact.push_back(m.pool.is_compact(blocks[i]));
  }
  m.ReleaseTable(s, std::nullopt);
  s.host_slots = std::move(*slots);
  s.host_compact = std::move(compact);
  s.swapped = true;
  m.swapped_out_blocks += static_cast<int64_t>(plan.device_host.size());
  m.MaybeVerify();
  return plan;
}

std::optional<KvCacheManager::SwapPlan> KvCacheManager::SwapIn(SeqId seq) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(s.swapped) << "sequence " << seq << " is not swapped out";
  // Blocks come back to the region they left (their bytes are in that region's dtype).
  const int n = static_cast<int>(s.host_slots.size());
  const int n_compact = static_cast<int>(std::count(s.host_compact.begin(), s.host_compact.end(), 1));
  if (n - n_compact > m.pool.num_free() || n_compact > m.pool.num_compact_free()) return std::nullopt;
  SwapPlan plan;
  for (int i = 0; i < n; ++i) {
    const std::optional<BlockId> b = s.host_compact[i] ? m.pool.AllocateCompact() : m.TakeBlock();
    CHECK(b.has_value());
    s.table.Append(*b);
    plan.device_host.emplace_back(*b, s.host_slots[i]);
    m.host.Release(s.host_slots[i]);
  }
  s.host_slots.clear();
  s.host_compact.clear();
  s.swapped = false;
  m.swapped_in_blocks += n;
  m.MaybeVerify();
  return plan;
}

bool KvCacheManager::IsSwapped(SeqId seq) const {
  auto it = impl_->seqs.find(seq);
  return it != impl_->seqs.end() && it->second.swapped;
}

int KvCacheManager::num_cached_tokens(SeqId seq) const { return impl_->Get(seq).table.num_tokens(); }

std::span<const int32_t> KvCacheManager::host_slots(SeqId seq) const { return impl_->Get(seq).host_slots; }

bool KvCacheManager::holds_compact_blocks(SeqId seq) const {
  const Impl::Seq& s = impl_->Get(seq);
  if (s.swapped) return std::find(s.host_compact.begin(), s.host_compact.end(), 1) != s.host_compact.end();
  const std::span<const BlockId> blocks = s.table.blocks();
  return std::any_of(blocks.begin(), blocks.end(), [&](BlockId b) { return is_compact_block(b); });
}

uint8_t* KvCacheManager::host_block_data(int32_t host_slot) { return impl_->host.data(host_slot); }
std::span<uint8_t> KvCacheManager::host_tier_memory() { return impl_->host.memory(); }

}  // namespace kvserve
