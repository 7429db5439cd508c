#include "server/events/kv_event_hash.h"

#include "common/sha256.h"

#include <nlohmann/json.hpp>
#include <vector>

namespace kvserve {
namespace {

KvEventDigest CborDigest(const nlohmann::json& item) {
  const std::vector<uint8_t> bytes = nlohmann::json::to_cbor(item);
  return Sha256Of(bytes.data(), bytes.size());
}

}  // namespace

KvEventDigest KvEventRootDigest(std::string_view seed) {
  return CborDigest(nlohmann::json(std::string(seed)));
}

KvEventDigest KvEventBlockDigest(const KvEventDigest& parent, std::span<const int32_t> tokens, std::string_view salt) {
  nlohmann::json ids = nlohmann::json::array();
  for (int32_t t : tokens) ids.push_back(static_cast<uint64_t>(t));  // ids are >= 0: CBOR major type 0
  nlohmann::json extra = salt.empty() ? nlohmann::json(nullptr) : nlohmann::json::array({std::string(salt)});
  const nlohmann::json item = nlohmann::json::array(
      {nlohmann::json::binary(std::vector<uint8_t>(parent.begin(), parent.end())), std::move(ids), std::move(extra)});
  return CborDigest(item);
}

uint64_t KvEventHashValue(const KvEventDigest& digest) {
  uint64_t v = 0;
  for (size_t i = 24; i < 32; ++i) v = (v << 8) | digest[i];
  return v;
}

}  // namespace kvserve
