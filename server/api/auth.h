// ApiKeyAuth: checks `Authorization: Bearer <key>` (HTTP) or `authorization` metadata (gRPC)
// against the configured API keys in constant time, and names the caller's tenant.
//
// Comparison: the presented key and every configured key are hashed (SHA-256) and the
// digests compared with CRYPTO_memcmp; every configured key is compared, with no early exit,
// so the time taken does not depend on which key (or how much of one) matched.
// Tenant identity: "key-" + the first 8 bytes of SHA-256("kvserve-tenant\0" + key) in hex, so
// logs, chat-session limits and cache salts name a caller without revealing the key.
// Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

class ApiKeyAuth {
 public:
  // No keys: authentication is off and every caller is the anonymous tenant "".
  explicit ApiKeyAuth(const std::vector<std::string>& keys);

  bool enabled() const { return !digests_.empty(); }

  // The tenant of the caller presenting `authorization` (the full header value, e.g.
  // "Bearer sk-123"; the scheme is case-insensitive), or nullopt when auth is on and the key
  // is missing or wrong. With auth off: "" for everyone.
  [[nodiscard]] std::optional<std::string> Authenticate(std::string_view authorization) const;

  // The key inside an "Authorization" value ("Bearer <key>"), or "" when absent.
  static std::string_view BearerToken(std::string_view authorization);

 private:
  using Digest = std::array<unsigned char, 32>;
  std::vector<Digest> digests_;
  std::vector<std::string> tenants_;
};

}  // namespace kvserve
