// PrefixIndex: which full KV blocks hold which token prefixes, so identical prompt prefixes
// reuse computed blocks.
//
// A full block of `block_size` tokens is keyed by a chained hash
//     hash(block) = H(hash(parent block) || block tokens (int32 LE) || salt)
// with H = SHA-256 (OpenSSL libcrypto) unless a test substitutes a weak function to force
// collisions. The hash only finds a candidate; Find() accepts it only if the stored tokens and
// salt equal the request's and the stored parent is exactly the block matched one level up
// (block id + publish epoch, so a recycled parent id never matches). A collision can therefore
// cost a miss, never serve another prefix's data.
//
// Invariants (VerifyIntegrity): every map entry names an indexed block whose meta holds that
// hash; every indexed block is in the map once; tokens.size() == block_size; hash ==
// H(parent_hash, tokens, salt). The index does not own blocks: KvCacheManager keeps it in step
// with the BlockPool (a block leaves the index when the pool hands it out again).
//
// Engine thread only; no locks.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "common/status.h"

namespace kvserve {

using BlockHash = std::array<uint8_t, 32>;

// H(parent, tokens, salt). Pure; thread-safe.
using PrefixHashFn = BlockHash (*)(const BlockHash& parent, std::span<const int32_t> tokens,
                                   std::string_view salt);
BlockHash Sha256BlockHash(const BlockHash& parent, std::span<const int32_t> tokens, std::string_view salt);

// Exact identity of an indexed block: its id and the epoch at which it was published.
struct PrefixRef {
  BlockId block = kNoBlock;
  uint64_t epoch = 0;
  bool operator==(const PrefixRef&) const = default;
};
inline constexpr PrefixRef kPrefixRoot{};

// A change of the index, for subscribers outside the engine (KV events for a router): a block
// published, with its parent and contents, or removed.
struct PrefixEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind = Kind::kStored;
  PrefixRef block;
  PrefixRef parent;             // kStored (kPrefixRoot: the first block of a prompt)
  std::vector<int32_t> tokens;  // kStored
  std::string salt;             // kStored
};

class PrefixIndex {
 public:
  // REQUIRES: num_blocks > 0, block_size > 0. `hash` nullptr: SHA-256.
  PrefixIndex(int num_blocks, int block_size, PrefixHashFn hash);

  [[nodiscard]] BlockHash Hash(const BlockHash& parent, std::span<const int32_t> tokens,
                               std::string_view salt) const {
    return hash_(parent, tokens, salt);
  }

  // The verified block holding `tokens` (one block) under `salt` right after `parent`, or
  // nullopt (no entry, or an entry whose tokens/salt/parent differ: a collision).
  [[nodiscard]] std::optional<BlockId> Find(const BlockHash& hash, const PrefixRef& parent,
                                            std::span<const int32_t> tokens, std::string_view salt) const;

  // Publishes block `id` (full, immutable from now on) under `hash`. Returns the ref of the
  // block that now represents this content: `id` itself, or an already indexed identical
  // block (same tokens, salt and parent; `id` stays private). nullopt on a collision (the
  // hash is taken by different content; nothing changed).
  // REQUIRES: !indexed(id), tokens.size() == block_size.
  [[nodiscard]] std::optional<PrefixRef> Publish(BlockId id, const BlockHash& hash, const BlockHash& parent_hash,
                                                 const PrefixRef& parent, std::span<const int32_t> tokens,
                                                 std::string_view salt);
  // Forgets block `id`. REQUIRES: indexed(id).
  void Remove(BlockId id);

  // While on, Publish and Remove record a PrefixEvent each (duplicates and collisions, which
  // change nothing, none); TakeEvents hands them over in order.
  void set_record_events(bool on) { record_events_ = on; }
  std::vector<PrefixEvent> TakeEvents() { return std::move(events_); }
  // The index as it is now, as the kStored events that would build it: every indexed block,
  // in the order it was published (a parent before its children).
  std::vector<PrefixEvent> Snapshot() const;

  bool indexed(BlockId id) const { return meta_[Checked(id)].indexed; }
  // REQUIRES: indexed(id).
  PrefixRef ref(BlockId id) const;
  const BlockHash& hash(BlockId id) const { return meta_[Checked(id)].hash; }
  std::span<const int32_t> tokens(BlockId id) const { return meta_[Checked(id)].tokens; }
  int num_indexed() const { return static_cast<int>(map_.size()); }

  [[nodiscard]] Status VerifyIntegrity() const;

 private:
  struct BlockMeta {
    bool indexed = false;
    uint64_t epoch = 0;
    BlockHash hash{};
    BlockHash parent_hash{};
    PrefixRef parent;
    std::vector<int32_t> tokens;  // [block_size]
    std::string salt;
  };
  struct HashOfHash {
    size_t operator()(const BlockHash& h) const {
      size_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | h[i];
      return v;
    }
  };
  size_t Checked(BlockId id) const {
    CHECK(id >= 0 && id < static_cast<BlockId>(meta_.size())) << "block id " << id << " out of range";
    return static_cast<size_t>(id);
  }
  bool Matches(const BlockMeta& m, const PrefixRef& parent, std::span<const int32_t> tokens,
               std::string_view salt) const;

  int block_size_;
  PrefixHashFn hash_;
  uint64_t next_epoch_ = 1;
  std::vector<BlockMeta> meta_;  // [num_blocks]
  std::unordered_map<BlockHash, BlockId, HashOfHash> map_;
  bool record_events_ = false;
  std::vector<PrefixEvent> events_;
};

}  // namespace kvserve
