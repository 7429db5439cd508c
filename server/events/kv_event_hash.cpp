#include "server/events/kv_event_hash.h"

#include <openssl/sha.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace kvserve {
namespace {

KvEventDigest Sha256(const std::vector<uint8_t>& bytes) {
  KvEventDigest out{};
  SHA256(bytes.data(), bytes.size(), out.data());
  return out;
}

}  // namespace

KvEventDigest KvEventRootDigest(std::string_view seed) {
  return Sha256(nlohmann::json::to_cbor(nlohmann::json(std::string(seed))));
}

KvEventDigest KvEventBlockDigest(const KvEventDigest& parent, std::span<const int32_t> tokens, std::string_view salt) {
  nlohmann::json ids = nlohmann::json::array();
  for (int32_t t : tokens) ids.push_back(static_cast<uint64_t>(t));  // ids are >= 0: CBOR major type 0
  nlohmann::json extra = salt.empty() ? nlohmann::json(nullptr) : nlohmann::json::array({std::string(salt)});
  const nlohmann::json item = nlohmann::json::array(
      {nlohmann::json::binary(std::vector<uint8_t>(parent.begin(), parent.end())), std::move(ids), std::move(extra)});
  return Sha256(nlohmann::json::to_cbor(item));
}

uint64_t KvEventHashValue(const KvEventDigest& digest) {
  uint64_t v = 0;
  for (size_t i = 24; i < 32; ++i) v = (v << 8) | digest[i];
  return v;
}

}  // namespace kvserve
