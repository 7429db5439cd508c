#include "cache/prefix_index.h"

#include "common/sha256.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvserve {

BlockHash Sha256BlockHash(const BlockHash& parent, std::span<const int32_t> tokens, std::string_view salt) {
  // Tokens as little-endian int32 so the hash does not depend on the host.
  std::vector<uint8_t> token_bytes(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) token_bytes[i * 4 + b] = static_cast<uint8_t>(t >> (8 * b));
  }
  Sha256Hasher h;
  h.Add(parent.data(), parent.size());
  h.Add(token_bytes.data(), token_bytes.size());
  h.Add(salt);
  return h.Finish();
}

PrefixIndex::PrefixIndex(int num_blocks, int block_size, PrefixHashFn hash)
    : block_size_(block_size), hash_(hash != nullptr ? hash : &Sha256BlockHash) {
  CHECK_GT(num_blocks, 0);
  CHECK_GT(block_size, 0);
  meta_.resize(num_blocks);
}

bool PrefixIndex::Matches(const BlockMeta& m, const PrefixRef& parent, std::span<const int32_t> tokens,
                          std::string_view salt) const {
  return m.indexed && m.parent == parent && m.salt == salt &&
         std::equal(m.tokens.begin(), m.tokens.end(), tokens.begin(), tokens.end());
}

std::optional<BlockId> PrefixIndex::Find(const BlockHash& hash, const PrefixRef& parent,
                                         std::span<const int32_t> tokens, std::string_view salt) const {
  auto it = map_.find(hash);
  if (it == map_.end()) return std::nullopt;
  if (!Matches(meta_[it->second], parent, tokens, salt)) return std::nullopt;  // collision
  return it->second;
}

std::optional<PrefixRef> PrefixIndex::Publish(BlockId id, const BlockHash& hash, const BlockHash& parent_hash,
                                              const PrefixRef& parent, std::span<const int32_t> tokens,
                                              std::string_view salt) {
  BlockMeta& m = meta_[Checked(id)];
  CHECK(!m.indexed) << "block " << id << " published twice";
  CHECK_EQ(static_cast<int>(tokens.size()), block_size_);
  auto it = map_.find(hash);
  if (it != map_.end()) {
    if (Matches(meta_[it->second], parent, tokens, salt)) return ref(it->second);  // duplicate
    return std::nullopt;                                                          // collision
  }
  m.indexed = true;
  m.epoch = next_epoch_++;
  m.hash = hash;
  m.parent_hash = parent_hash;
  m.parent = parent;
  m.tokens.assign(tokens.begin(), tokens.end());
  m.salt.assign(salt);
  map_.emplace(hash, id);
  if (record_events_) events_.push_back({PrefixEvent::Kind::kStored, {id, m.epoch}, parent, m.tokens, m.salt});
  return PrefixRef{id, m.epoch};
}

std::vector<PrefixEvent> PrefixIndex::Snapshot() const {
  std::vector<PrefixEvent> out;
  out.reserve(map_.size());
  for (const auto& entry : map_) {
    const BlockId id = entry.second;
    const BlockMeta& m = meta_[static_cast<size_t>(id)];
    out.push_back({PrefixEvent::Kind::kStored, {id, m.epoch}, m.parent, m.tokens, m.salt});
  }
  std::sort(out.begin(), out.end(), [](const PrefixEvent& a, const PrefixEvent& b) { return a.block.epoch < b.block.epoch; });
  return out;
}

void PrefixIndex::Remove(BlockId id) {
  BlockMeta& m = meta_[Checked(id)];
  CHECK(m.indexed) << "block " << id << " is not in the prefix index";
  if (record_events_) events_.push_back({PrefixEvent::Kind::kRemoved, {id, m.epoch}, {}, {}, {}});
  map_.erase(m.hash);
  m.indexed = false;
  m.tokens.clear();
  m.salt.clear();
}

PrefixRef PrefixIndex::ref(BlockId id) const {
  const BlockMeta& m = meta_[Checked(id)];
  CHECK(m.indexed) << "block " << id << " is not in the prefix index";
  return PrefixRef{id, m.epoch};
}

Status PrefixIndex::VerifyIntegrity() const {
  size_t indexed = 0;
  for (BlockId id = 0; id < static_cast<BlockId>(meta_.size()); ++id) {
    const BlockMeta& m = meta_[id];
    if (!m.indexed) continue;
    ++indexed;
    const std::string name = "indexed block " + std::to_string(id);
    auto it = map_.find(m.hash);
    if (it == map_.end() || it->second != id) return InternalError(name + " is not found under its hash");
    if (static_cast<int>(m.tokens.size()) != block_size_) {
      return InternalError(name + " stores " + std::to_string(m.tokens.size()) + " tokens");
    }
    if (hash_(m.parent_hash, m.tokens, m.salt) != m.hash) {
      return InternalError(name + ": stored hash does not match its parent hash, tokens and salt");
    }
    if (m.parent.block != kNoBlock && m.parent.epoch >= m.epoch) {
      return InternalError(name + " was published before its parent");
    }
  }
  if (indexed != map_.size()) {
    return InternalError("prefix map has " + std::to_string(map_.size()) + " entries for " +
                         std::to_string(indexed) + " indexed blocks");
  }
  return OkStatus();
}

}  // namespace kvserve
