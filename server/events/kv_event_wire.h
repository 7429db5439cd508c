// KV events on the wire, as vLLM publishes them (vllm/distributed/kv_events.py) and llm-d's
// indexer reads them: a batch is the msgpack array [ts (float64), [event, ...], dp_rank (0)],
// each event a positional array led by its tag:
//   ["BlockStored", [hash...], parent hash | nil, [token id...], block_size, nil, "GPU", nil]
//   ["BlockRemoved", [hash...], "GPU"]
//   ["AllBlocksCleared"]
// Hashes are always msgpack uint64 with the full-width head (0xcf): llm-d rejects a hash that
// decodes as a narrower integer. Medium "GPU" names the engine's primary KV pool, on any device
// (the tier routers score highest); lora_id and lora_name are nil (kvserve serves no adapters).
//
// KvEventTranslator turns the prefix index's events (cache/prefix_index.h: block ids and
// epochs) into these, hashing each stored block from its parent's digest, its tokens and its
// salt (server/events/kv_event_hash.h). A salted block (a tenant's, or a request's cache_salt)
// is published under its salted hash with no token ids, so the router never holds a tenant's
// text and cannot index it under a key another tenant's prompt produces (llm-d's indexer
// recomputes keys from token ids and has no salts: it skips such blocks). Not thread-safe: one
// translator per publisher thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/prefix_index.h"
#include "server/events/kv_event_hash.h"

namespace kvserve {

struct KvWireEvent {
  enum class Kind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;  // kBlockStored: nullopt for a chain's first block
  std::vector<int32_t> tokens;     // kBlockStored: hashes.size() * block_size ids, or none (salted)
};

// msgpack [ts, [events], 0].
std::string EncodeKvEventBatch(double ts, const std::vector<KvWireEvent>& events, int block_size);

class KvEventTranslator {
 public:
  explicit KvEventTranslator(std::string_view hash_seed);

  // One engine step's events, in order. Consecutive stored blocks of one chain become one
  // BlockStored, consecutive removals one BlockRemoved. A stored block whose parent this
  // translator never saw (cannot happen while it sees every event from the start) is
  // skipped and counted, as are its descendants.
  std::vector<KvWireEvent> Translate(const std::vector<PrefixEvent>& events);

  // Forgets every published block (after an AllBlocksCleared).
  void Reset() { blocks_.clear(); }

  size_t num_known_blocks() const { return blocks_.size(); }
  int64_t num_orphans() const { return orphans_; }

 private:
  struct RefHash {
    size_t operator()(const PrefixRef& r) const {
      return std::hash<uint64_t>()(r.epoch) ^ (static_cast<size_t>(r.block) << 1);
    }
  };
  KvEventDigest root_;
  std::unordered_map<PrefixRef, KvEventDigest, RefHash> blocks_;  // the published blocks
  int64_t orphans_ = 0;
};

}  // namespace kvserve
