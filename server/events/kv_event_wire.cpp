#include "server/events/kv_event_wire.h"

#include <bit>
#include <msgpack.hpp>

namespace kvserve {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Always float64 (0xcb), as msgspec writes a Python float: msgpack-c's pack_double writes a
// whole number as an integer, which a decoder expecting a float may refuse.
void PackFloat64(msgpack::sbuffer& buf, double d) {
  char bytes[9] = {static_cast<char>(0xcb)};
  uint64_t bits = std::bit_cast<uint64_t>(d);
  for (int i = 8; i >= 1; --i, bits >>= 8) bytes[i] = static_cast<char>(bits & 0xff);
  buf.write(bytes, sizeof(bytes));
}

void PackHashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_fix_uint64(h);
}

void PackEvent(Packer& pk, const KvWireEvent& e, int block_size) {
  switch (e.kind) {
    case KvWireEvent::Kind::kBlockStored:
      pk.pack_array(8);
      pk.pack(std::string_view("BlockStored"));
      PackHashes(pk, e.hashes);
      if (e.parent) {
        pk.pack_fix_uint64(*e.parent);
      } else {
        pk.pack_nil();
      }
      pk.pack_array(static_cast<uint32_t>(e.tokens.size()));
      for (int32_t t : e.tokens) pk.pack(static_cast<uint32_t>(t));
      pk.pack(block_size);
      pk.pack_nil();  // lora_id
      pk.pack(std::string_view("GPU"));
      pk.pack_nil();  // lora_name
      return;
    case KvWireEvent::Kind::kBlockRemoved:
      pk.pack_array(3);
      pk.pack(std::string_view("BlockRemoved"));
      PackHashes(pk, e.hashes);
      pk.pack(std::string_view("GPU"));
      return;
    case KvWireEvent::Kind::kAllBlocksCleared:
      pk.pack_array(1);
      pk.pack(std::string_view("AllBlocksCleared"));
      return;
  }
}

}  // namespace

std::string EncodeKvEventBatch(double ts, const std::vector<KvWireEvent>& events, int block_size) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(3);
  PackFloat64(buf, ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvWireEvent& e : events) PackEvent(pk, e, block_size);
  pk.pack(0);  // data-parallel rank
  return std::string(buf.data(), buf.size());
}

KvEventTranslator::KvEventTranslator(std::string_view hash_seed) : root_(KvEventRootDigest(hash_seed)) {}

std::vector<KvWireEvent> KvEventTranslator::Translate(const std::vector<PrefixEvent>& events) {
  std::vector<KvWireEvent> out;
  std::optional<PrefixRef> chain_tail;  // the last block of out.back() while it is a growing BlockStored
  bool chain_salted = false;
  for (const PrefixEvent& e : events) {
    if (e.kind == PrefixEvent::Kind::kRemoved) {
      chain_tail.reset();
      auto it = blocks_.find(e.block);
      if (it == blocks_.end()) continue;  // an orphan's removal: never published
      if (out.empty() || out.back().kind != KvWireEvent::Kind::kBlockRemoved) {
        out.push_back({KvWireEvent::Kind::kBlockRemoved, {}, std::nullopt, {}});
      }
      out.back().hashes.push_back(KvEventHashValue(it->second));
      blocks_.erase(it);
      continue;
    }
    const bool root = e.parent == kPrefixRoot;
    const KvEventDigest* parent = nullptr;
    if (!root) {
      auto it = blocks_.find(e.parent);
      if (it == blocks_.end()) {
        ++orphans_;
        chain_tail.reset();
        continue;
      }
      parent = &it->second;
    }
    // vLLM folds cache_salt into the first block only; the chain carries it on.
    const KvEventDigest digest = KvEventBlockDigest(root ? root_ : *parent, e.tokens, root ? e.salt : "");
    const bool salted = !e.salt.empty();
    if (!(chain_tail && *chain_tail == e.parent && chain_salted == salted)) {
      const std::optional<uint64_t> parent_hash = root ? std::nullopt : std::optional(KvEventHashValue(*parent));
      out.push_back({KvWireEvent::Kind::kBlockStored, {}, parent_hash, {}});
    }
    out.back().hashes.push_back(KvEventHashValue(digest));
    if (!salted) out.back().tokens.insert(out.back().tokens.end(), e.tokens.begin(), e.tokens.end());
    blocks_[e.block] = digest;
    chain_tail = e.block;
    chain_salted = salted;
  }
  return out;
}

}  // namespace kvserve
