// KvCacheManager: the only cache type the scheduler and engine see. It owns the BlockPool,
// one BlockTable per sequence, the prefix index, the host offload tier and the counters, and
// answers "does this fit?" with std::nullopt instead of failing.
//
// Contracts:
//  * AllocateSlots(seq, n) reserves positions for n more tokens (blocks are taken only when
//    the table is full); if the pool cannot supply them nothing changes and nullopt says
//    "preempt or wait". Unreferenced cached prefix blocks are reused (evicted, LRU) before
//    failing.
//  * Isolation: a sequence writes only into blocks it holds with ref count 1. Full blocks
//    that were published to the prefix index are immutable; sharing happens only through
//    AcquireCachedPrefix (tokens verified, salt in the hash chain) and Fork (copy-on-write of
//    the partial last block). A hash collision can cost a miss, never another request's data.
//  * Positions are cache positions: after a sliding-window eviction the kept tokens are
//    re-indexed (the caller re-rotates the keys of `shifted_blocks`).
//  * Compaction (optional): a second region of smaller blocks in the compaction spec's dtype
//    (ids from num_blocks() on, BlockPool). Compact() moves old full blocks there; a
//    sequence's table may then mix regions, and every (src, dst) copy this class returns may
//    cross them: the backend converts (decode, re-encode). Compact blocks are never published
//    to the prefix index, and a partially kept one (Truncate) is copied back to the main region.
//
// Engine thread only; no locks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/kv_block_map.h"
#include "cache/kv_cache_stats.h"
#include "cache/kv_spec.h"
#include "cache/prefix_index.h"
#include "cache/window_policy.h"

namespace kvserve {

using PinId = int64_t;  // KvCacheManager::PinPrefix; 0 = none

// Switches that only tests set (never production): self-checks and a weak hash.
struct KvCacheTestHooks {
  // CHECK VerifyIntegrity() at the end of every operation that changes state.
  bool verify_each_operation = false;
  // The block hash (nullptr: SHA-256), e.g. a weak one that forces collisions.
  PrefixHashFn prefix_hash = nullptr;
};

struct KvCacheManagerConfig {
  int num_blocks = 0;
  bool enable_prefix_caching = true;
  int num_host_blocks = 0;  // host offload tier capacity in blocks (0: no offload)
  // Compaction region: blocks of `compact_spec` (same shape and block size as the main spec,
  // a smaller dtype: its blocks must not be larger). 0: no compaction.
  int num_compact_blocks = 0;
  std::optional<KvSpec> compact_spec = std::nullopt;
  KvCacheTestHooks test_hooks = {};
};

class KvCacheManager {
 public:
  // REQUIRES: config.num_blocks > 0.
  KvCacheManager(KvSpec spec, const KvCacheManagerConfig& config);
  // Convenience: prefix caching on, no host tier.
  KvCacheManager(KvSpec spec, int num_blocks);
  ~KvCacheManager();

  const KvSpec& spec() const { return spec_; }
  int block_size() const { return spec_.block_size(); }
  int num_blocks() const;
  int num_free_blocks() const;  // free + cached (allocatable)
  int num_used_blocks() const;  // referenced (used + pinned)
  double usage_ratio() const;
  // Whether no sequence, pin or session holds block `id` (a free block may still be a cached
  // prefix block).
  bool is_free_block(BlockId id) const;
  [[nodiscard]] KvCacheStats stats() const;
  // Every device block's state, holder and fill, and every sequence (walks the whole pool).
  [[nodiscard]] KvBlockMap BlockMap() const;

  // ---- Sequences ----
  // For a new, empty sequence: finds the longest run of full blocks at the start of `tokens`
  // that is cached under `salt` (stored tokens compared, not just hashes), adds those blocks
  // to seq's table and returns the number of tokens they cover. Never covers the whole of
  // `tokens` (at least one token is left to compute so the step has logits). 0 when prefix
  // caching is off or nothing matches.
  [[nodiscard]] int AcquireCachedPrefix(SeqId seq, std::span<const int32_t> tokens,
                                        std::string_view salt);
  // Reserves positions for `num_new_tokens` more tokens of `seq` (a new sequence starts
  // empty). Returns the blocks appended to its table, or nullopt (nothing changed).
  [[nodiscard]] std::optional<std::vector<BlockId>> AllocateSlots(SeqId seq, int num_new_tokens);
  [[nodiscard]] int BlocksNeeded(SeqId seq, int num_new_tokens) const;
  // Declares that cache positions [0, num_computed) of seq now hold `tokens[0, num_computed)`
  // (tokens of the sequence as cached, i.e. after any window eviction). Blocks that became
  // full are hashed (SHA-256 chain over parent hash, block tokens and salt) and published to
  // the prefix index. Sequences under a sliding window are never published.
  void CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                      std::string_view salt);
  // Returns all of seq's blocks (device or host) and forgets it. No-op for unknown ids.
  void Free(SeqId seq);
  // Free, counting seq's device blocks as evicted for `reason` (kSession, kPreemption).
  void Free(SeqId seq, EvictionReason reason);
  // Gives `to` the table of `from` (e.g. a finished request's cache becomes its chat
  // session's). REQUIRES: Contains(from) && !Contains(to).
  void Rename(SeqId from, SeqId to);
  // Drops positions >= num_tokens (whole blocks released; a partially kept block stays
  // owned). Used when a chat turn diverges from the stored history. A partially kept block
  // that is shared (prefix hit, fork sibling, pin) is replaced by a private copy: returns the
  // (src, dst) copies the backend must perform first (usually none), or nullopt when no block
  // is free for that copy (nothing changed). REQUIRES: Contains(seq), !IsSwapped(seq),
  // 0 <= num_tokens <= table(seq).num_tokens().
  [[nodiscard]] std::optional<std::vector<std::pair<BlockId, BlockId>>> Truncate(SeqId seq, int num_tokens);
  // n > 1: `child` starts with parent's blocks; full blocks are shared (ref count + 1), the
  // partial last block is copied into a fresh block. Returns the (src, dst) block copies the
  // backend must perform first, or nullopt when no block is free (nothing changed).
  [[nodiscard]] std::optional<std::vector<std::pair<BlockId, BlockId>>> Fork(SeqId parent, SeqId child);

  bool Contains(SeqId seq) const;
  // REQUIRES: Contains(seq) and !IsSwapped(seq).
  const BlockTable& table(SeqId seq) const;
  int num_sequences() const;

  // ---- Sliding window ----
  struct WindowEviction {
    int evicted_tokens = 0;              // positions removed (whole blocks)
    std::vector<BlockId> shifted_blocks; // kept blocks after the sinks: re-rotate keys by -evicted
    // Kept blocks that were shared (prefix hit, fork sibling, pin) are replaced by private
    // copies before their keys change: perform these (src, dst) copies BEFORE ShiftKeys.
    std::vector<std::pair<BlockId, BlockId>> copies;
  };
  // If holding `num_new_tokens` more positions would exceed policy.window_tokens, removes
  // whole blocks right after the sink blocks (at least enough, and at least a quarter of the
  // window so evictions are not per block) and frees them, counting kWindow evictions.
  // Exactly: sink_blocks = ceil(sink_tokens / block); evicted blocks = max(ceil(excess /
  // block), ceil((window / 4) / block)), capped by the full blocks after the sinks (the
  // partially filled last block is never evicted); if private copies of shared kept blocks
  // do not fit in the pool, more blocks are evicted instead. Once called with a sliding
  // policy the sequence is never published to the prefix index again.
  // No-op for kFull. REQUIRES: Contains(seq), !IsSwapped(seq), and for kSlidingWindow
  // window_tokens > (sink_blocks + 1) * block_size.
  [[nodiscard]] WindowEviction EvictForWindow(SeqId seq, const WindowPolicy& policy, int num_new_tokens);

  // ---- Compaction ----
  // Moves seq's full blocks that end at least `keep_recent_tokens` positions before its last
  // one, and that it alone holds, to the compact region, oldest first, as many as it has free
  // blocks for. Returns the (main src, compact dst) copies the backend converts right away,
  // before any other state-changing call or Forward (the src blocks are free from now on;
  // a published one stays in the prefix index, its contents intact). REQUIRES: Contains(seq),
  // !IsSwapped(seq).
  [[nodiscard]] std::vector<std::pair<BlockId, BlockId>> Compact(SeqId seq, int keep_recent_tokens);
  bool is_compact_block(BlockId id) const;
  // The compaction region's layout; nullptr without compaction.
  const KvSpec* compact_spec() const;
  int num_compact_blocks() const;
  int num_free_compact_blocks() const;

  // ---- Pinned prefixes ----
  // Pins the cached full blocks that cover the start of `tokens` under `salt` (e.g. a system
  // prompt computed by a previous request): each pin holds its blocks once, and a block is
  // never evicted while a pin holds it. Returns the pin (id 0 and no tokens when no block
  // matched: nothing is pinned).
  struct Pin {
    PinId id = 0;
    int tokens = 0;  // whole blocks of `tokens`
    int blocks = 0;
  };
  Pin PinPrefix(std::span<const int32_t> tokens, std::string_view salt);
  // Releases pin `id`; false when there is none.
  bool Unpin(PinId id);
  void UnpinAll();
  // Distinct blocks held by pins.
  int num_pinned_blocks() const;

  // ---- Host offload tier ----
  // Copies to perform: device block -> host slot (SwapOut) or host slot -> device block
  // (SwapIn). The caller moves the bytes (Backend::ReadBlock/WriteBlock with host_block_data).
  struct SwapPlan {
    std::vector<std::pair<BlockId, int32_t>> device_host;  // (device block, host slot)
  };
  // Moves seq to the host tier: reserves host slots and releases its device blocks at once;
  // their bytes stay intact until the next Forward/CopyBlocks/WriteBlock, so the caller
  // performs the plan's copies right away, before any other state-changing call or Forward.
  // Shared blocks are copied too (they come back private). nullopt when the tier is off or
  // full (nothing changed). REQUIRES: Contains(seq), !IsSwapped(seq).
  [[nodiscard]] std::optional<SwapPlan> SwapOut(SeqId seq);
  // Brings seq back: allocates device blocks and releases the host slots (copy right away,
  // as above). nullopt when the pool cannot supply them (nothing changed).
  // REQUIRES: IsSwapped(seq).
  [[nodiscard]] std::optional<SwapPlan> SwapIn(SeqId seq);
  bool IsSwapped(SeqId seq) const;
  // Cache positions `seq` holds (also while swapped). REQUIRES: Contains(seq).
  int num_cached_tokens(SeqId seq) const;
  // While swapped: seq's host slots, one per block in table order (else empty).
  std::span<const int32_t> host_slots(SeqId seq) const;
  // Whether a block of seq is in (or, swapped, came from) the compaction region.
  bool holds_compact_blocks(SeqId seq) const;
  uint8_t* host_block_data(int32_t host_slot);
  // The host tier's whole memory (for the backend to page-lock); empty when the tier is off.
  std::span<uint8_t> host_tier_memory();

  // KV events: while on, the prefix index records each block it publishes or forgets
  // (PrefixIndex::set_record_events); TakePrefixEvents hands them over in order.
  void set_record_prefix_events(bool on);
  std::vector<PrefixEvent> TakePrefixEvents();
  // The prefix index now, as the events that build it (PrefixIndex::Snapshot).
  std::vector<PrefixEvent> SnapshotPrefixEvents() const;

  // Pool, tables, prefix index and host tier are mutually consistent: ref counts equal the
  // number of holders, free-list membership matches ref counts, published blocks are full
  // and immutable, no block is both free-without-hash and indexed.
  [[nodiscard]] Status VerifyIntegrity() const;

 private:
  struct Impl;
  KvSpec spec_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
