// KvCacheStats: a snapshot of the cache's occupancy and activity counters, produced by
// KvCacheManager::stats() on the engine thread and copied out to metrics. Plain value.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace kvserve {

enum class EvictionReason : int {
  kWindow = 0,      // sliding-window eviction of a session
  kPrefixLru = 1,   // an unreferenced cached prefix block reused for new data
  kSession = 2,     // a chat session dropped (TTL / LRU / limit)
  kPreemption = 3,  // a running request's blocks freed to make room (recompute)
};
inline constexpr int kNumEvictionReasons = 4;
inline const char* EvictionReasonName(EvictionReason r) {
  switch (r) {
    case EvictionReason::kWindow: return "window";
    case EvictionReason::kPrefixLru: return "prefix_lru";
    case EvictionReason::kSession: return "session";
    case EvictionReason::kPreemption: return "preemption";
  }
  return "unknown";
}

struct KvCacheStats {
  // Device (or, for the CPU backend, primary host) pool. Every block is in exactly one state:
  int total_blocks = 0;
  int used_blocks = 0;    // referenced by a sequence or session (not pinned)
  int free_blocks = 0;    // unreferenced, holding nothing reusable
  int cached_blocks = 0;  // unreferenced but holding a reusable prefix (evictable, LRU)
  int pinned_blocks = 0;  // pinned prefixes: never evicted
  double usage_ratio = 0;  // (used + pinned) / total
  int64_t tokens_stored = 0;  // token positions held by live sequences
  int block_size = 0;
  int64_t block_bytes = 0;
  // Bytes of the pool by storage dtype name ("f16", "int8", ...), scales included.
  std::map<std::string, int64_t> bytes_by_dtype;

  // Compaction region (old context re-encoded to a smaller dtype; its bytes are in
  // bytes_by_dtype): blocks, blocks holding data, and blocks moved there since start.
  int compact_total_blocks = 0;
  int compact_used_blocks = 0;
  int64_t compacted_blocks = 0;

  // Host offload tier.
  int host_total_blocks = 0;
  int host_used_blocks = 0;

  // Counters since start.
  std::array<int64_t, kNumEvictionReasons> evicted_blocks{};
  int64_t prefix_queries = 0;       // AcquireCachedPrefix calls
  int64_t prefix_hits = 0;          // calls that reused at least one block
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up
  int64_t prefix_hit_tokens = 0;    // prompt tokens served from cache
  int64_t swapped_out_blocks = 0;
  int64_t swapped_in_blocks = 0;
};

}  // namespace kvserve
