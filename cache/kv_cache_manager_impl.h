// Private to cache/kv_cache_manager*.cpp: the state behind KvCacheManager's pimpl and the
// helpers its translation units share. Not part of the module's interface.
//
// Holders of a device block: the tables that list it plus one per pin that holds it.
// BlockPool's ref count equals that number; a block with ref 0 is free (cached if it is
// still indexed).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/host_tier.h"
#include "cache/kv_cache_manager.h"
#include "cache/prefix_index.h"

namespace kvserve {

struct KvCacheManager::Impl {
  // One link of a sequence's hash chain: the hash of its i-th full block and the indexed
  // block that holds that content (its own, or an identical one published earlier).
  struct ChainLink {
    BlockHash hash{};
    PrefixRef canonical;
  };
  struct Seq {
    BlockTable table;               // device blocks (empty while swapped; num_tokens kept)
    std::vector<int32_t> host_slots;  // while swapped: one per block, in table order
    std::vector<char> host_compact;   // while swapped: whether that block came from the compact region
    bool swapped = false;
    bool windowed = false;      // a sliding window applies: never published again
    bool chain_broken = false;  // a collision or salt change: publish nothing further
    std::vector<ChainLink> chain;  // [leading full blocks hashed so far]
  };

  Impl(const KvSpec& spec, const KvCacheManagerConfig& config);

  Seq& Get(SeqId id);
  const Seq& Get(SeqId id) const;
  // A block from the pool's LRU head; a cached prefix block it reuses leaves the index
  // (counted as a kPrefixLru eviction). nullopt when none is free.
  std::optional<BlockId> TakeBlock();
  // Walks the index along `tokens` under `salt`: the verified blocks of the longest cached
  // run of whole blocks, at most `max_blocks`.
  std::vector<BlockId> MatchPrefix(std::span<const int32_t> tokens, std::string_view salt, int max_blocks,
                                   std::vector<ChainLink>* chain) const;
  void ReleaseTable(Seq& s, std::optional<EvictionReason> reason);
  void MaybeVerify() const;

  int block_size;
  KvCacheManagerConfig config;
  BlockPool pool;
  PrefixIndex index;
  HostTier host;
  std::vector<uint16_t> pinned;  // [num_blocks] pins holding the block
  int num_pinned = 0;            // blocks with pinned > 0
  std::map<PinId, std::vector<BlockId>> pins;
  PinId next_pin_id = 1;
  std::unordered_map<SeqId, Seq> seqs;
  std::map<std::string, int64_t> pool_bytes_by_dtype;  // both regions, scales included
  // Counters.
  std::array<int64_t, kNumEvictionReasons> evicted_blocks{};
  int64_t prefix_queries = 0;
  int64_t prefix_hits = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t swapped_out_blocks = 0;
  int64_t swapped_in_blocks = 0;
  int64_t compacted_blocks = 0;
  // Back pointer for MaybeVerify.
  const KvCacheManager* owner = nullptr;
};

}  // namespace kvserve
