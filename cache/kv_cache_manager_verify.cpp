// KvCacheManager: stats() and BlockMap() snapshots, and VerifyIntegrity() (pool, tables,
// pins, prefix index and host tier agree). See kv_cache_manager.h.
#include <algorithm>
#include <string>

#include "cache/kv_cache_manager.h"
#include "cache/kv_cache_manager_impl.h"

namespace kvserve {

KvCacheStats KvCacheManager::stats() const {
  const Impl& m = *impl_;
  KvCacheStats st;
  st.total_blocks = m.pool.num_blocks();
  for (BlockId b = 0; b < m.pool.num_blocks(); ++b) {
    if (m.pinned[b]) {
      ++st.pinned_blocks;
    } else if (!m.pool.is_free(b)) {
      ++st.used_blocks;
    } else if (m.index.indexed(b)) {
      ++st.cached_blocks;
    } else {
      ++st.free_blocks;
    }
  }
  st.usage_ratio = static_cast<double>(st.used_blocks + st.pinned_blocks) / st.total_blocks;
  for (const auto& [id, s] : m.seqs) st.tokens_stored += s.table.num_tokens();
  st.block_size = block_size();
  st.block_bytes = static_cast<int64_t>(spec_.block_bytes());
  st.bytes_by_dtype = m.pool_bytes_by_dtype;
  st.compact_total_blocks = m.pool.num_compact_blocks();
  st.compact_used_blocks = st.compact_total_blocks - m.pool.num_compact_free();
  st.compacted_blocks = m.compacted_blocks;
  st.host_total_blocks = m.host.num_slots();
  st.host_used_blocks = m.host.num_used();
  st.evicted_blocks = m.evicted_blocks;
  st.prefix_queries = m.prefix_queries;
  st.prefix_hits = m.prefix_hits;
  st.prefix_query_tokens = m.prefix_query_tokens;
  st.prefix_hit_tokens = m.prefix_hit_tokens;
  st.swapped_out_blocks = m.swapped_out_blocks;
  st.swapped_in_blocks = m.swapped_in_blocks;
  return st;
}

KvBlockMap KvCacheManager::BlockMap() const {
  const Impl& m = *impl_;
  const int bs = block_size();
  const int main_blocks = m.pool.num_blocks();
  const int n = m.pool.num_ids();  // both regions
  KvBlockMap map;
  map.block_size = bs;
  map.num_compact_blocks = n - main_blocks;
  map.state.assign(n, BlockState::kFree);
  map.holder.assign(n, -1);
  map.fill.assign(n, 0);
  std::vector<SeqId> ids;
  for (const auto& [id, s] : m.seqs) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) {
    const Impl::Seq& s = m.seqs.at(id);
    const int index = static_cast<int>(map.seqs.size());
    map.seqs.push_back({id, s.table.num_tokens(), s.table.num_blocks(), static_cast<int>(s.host_slots.size()),
                        s.swapped});
    std::span<const BlockId> blocks = s.table.blocks();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const BlockId b = blocks[i];
      if (map.holder[b] < 0) map.holder[b] = index;
      const int held = std::clamp(s.table.num_tokens() - static_cast<int>(i) * bs, 0, bs);
      map.fill[b] = static_cast<uint16_t>(std::max<int>(map.fill[b], held));
    }
  }
  for (BlockId b = 0; b < n; ++b) {
    BlockState state = BlockState::kFree;
    if (b < main_blocks && m.pinned[b]) {
      state = BlockState::kPinned;
      map.fill[b] = static_cast<uint16_t>(bs);
    } else if (m.pool.ref_count(b) > 1) {
      state = BlockState::kShared;
    } else if (m.pool.ref_count(b) == 1) {
      state = BlockState::kUsed;
    } else if (b < main_blocks && m.index.indexed(b)) {
      state = BlockState::kCached;
      map.fill[b] = static_cast<uint16_t>(bs);
    }
    map.state[b] = state;
    ++(b < main_blocks ? map.counts : map.compact_counts)[static_cast<size_t>(state)];
  }
  map.host_total_blocks = m.host.num_slots();
  map.host_used_blocks = m.host.num_used();
  map.prefix_indexed = m.index.num_indexed();
  return map;
}

Status KvCacheManager::VerifyIntegrity() const {
  const Impl& m = *impl_;
  RETURN_IF_ERROR(m.pool.VerifyIntegrity());
  RETURN_IF_ERROR(m.index.VerifyIntegrity());
  const int bs = block_size();
  const int n = m.pool.num_ids();  // both regions
  std::vector<int> holders(n, 0);
  std::vector<int32_t> host_slots;
  for (const auto& [id, s] : m.seqs) {
    const std::string name = "sequence " + std::to_string(id);
    const int tokens = s.table.num_tokens();
    const int want_blocks = (tokens + bs - 1) / bs;
    if (tokens < 0) return InternalError(name + " has negative token count");
    if (s.swapped) {
      if (s.table.num_blocks() != 0) return InternalError(name + " is swapped out but holds device blocks");
      if (static_cast<int>(s.host_slots.size()) != want_blocks || s.host_compact.size() != s.host_slots.size()) {
        return InternalError(name + " holds " + std::to_string(s.host_slots.size()) + " host slots for " +
                             std::to_string(tokens) + " tokens");
      }
      host_slots.insert(host_slots.end(), s.host_slots.begin(), s.host_slots.end());
      continue;
    }
    if (!s.host_slots.empty() || !s.host_compact.empty()) {
      return InternalError(name + " is on the device but holds host slots");
    }
    if (s.table.num_blocks() != want_blocks) {
      return InternalError(name + " holds " + std::to_string(tokens) + " tokens in " +
                           std::to_string(s.table.num_blocks()) + " blocks");
    }
    if (static_cast<int>(s.chain.size()) > tokens / bs) {
      return InternalError(name + " has hashed " + std::to_string(s.chain.size()) + " blocks but only " +
                           std::to_string(tokens / bs) + " are full");
    }
    const auto blocks = s.table.blocks();
    for (int i = 0; i < static_cast<int>(blocks.size()); ++i) {
      const BlockId b = blocks[i];
      if (b < 0 || b >= n) return InternalError(name + " has bad block " + std::to_string(b));
      for (int j = 0; j < i; ++j) {
        if (blocks[j] == b) return InternalError(name + " lists block " + std::to_string(b) + " twice");
      }
      ++holders[b];
      const bool full = (i + 1) * bs <= tokens;
      if (m.index.indexed(b) && !full) {
        return InternalError(name + " holds indexed block " + std::to_string(b) + " partially filled");
      }
      if (!full && (m.pool.ref_count(b) != 1 || m.pinned[b])) {
        return InternalError(name + "'s partially filled block " + std::to_string(b) + " is shared");
      }
      if (!full && m.pool.is_compact(b)) {
        return InternalError(name + "'s partially filled block " + std::to_string(b) + " is compact");
      }
      if (m.pool.is_compact(b) && m.index.indexed(b)) {
        return InternalError("compact block " + std::to_string(b) + " is indexed");
      }
      if (i < static_cast<int>(s.chain.size()) && m.index.indexed(b) && m.index.hash(b) != s.chain[i].hash) {
        return InternalError(name + "'s block " + std::to_string(b) + " is indexed under another hash");
      }
    }
  }
  std::vector<int> pin_holds(n, 0);
  for (const auto& [id, blocks] : m.pins) {
    for (BlockId b : blocks) {
      if (b < 0 || b >= n) return InternalError("pin " + std::to_string(id) + " lists a block out of range");
      ++pin_holds[b];
    }
  }
  int pinned = 0;
  for (BlockId b = 0; b < n; ++b) {
    if (pin_holds[b] != m.pinned[b]) {
      return InternalError("block " + std::to_string(b) + " is held by " + std::to_string(pin_holds[b]) +
                           " pins but counts " + std::to_string(m.pinned[b]));
    }
    if (m.pinned[b]) {
      ++pinned;
      holders[b] += m.pinned[b];
      if (!m.index.indexed(b)) return InternalError("pinned block " + std::to_string(b) + " is not indexed");
    }
    if (holders[b] != m.pool.ref_count(b)) {
      return InternalError("block " + std::to_string(b) + " has ref count " + std::to_string(m.pool.ref_count(b)) +
                           " but " + std::to_string(holders[b]) + " holders (tables + pins)");
    }
  }
  if (pinned != m.num_pinned) return InternalError("pinned block count out of step");
  RETURN_IF_ERROR(m.host.VerifyIntegrity(host_slots));
  return OkStatus();
}

}  // namespace kvserve
