// ApiKeyAuth: SHA-256 digests compared with CRYPTO_memcmp over every configured key.
#include "server/api/auth.h"

#include <openssl/crypto.h>

#include <cctype>

#include "common/sha256.h"

namespace kvserve {
namespace {

std::string TenantOf(const std::string& key) {
  std::string salted("kvserve-tenant");
  salted.push_back('\0');
  salted += key;
  return "key-" + ToHex(Sha256(salted).substr(0, 8));
}

}  // namespace

ApiKeyAuth::ApiKeyAuth(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (k.empty()) continue;
    digests_.push_back(Sha256Of(k.data(), k.size()));
    tenants_.push_back(TenantOf(k));
  }
}

std::string_view ApiKeyAuth::BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  size_t i = 0;
  while (i < authorization.size() && authorization[i] == ' ') ++i;
  authorization.remove_prefix(i);
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t k = 0; k < kScheme.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(authorization[k])) != kScheme[k]) return {};
  }
  if (authorization[kScheme.size()] != ' ') return {};
  authorization.remove_prefix(kScheme.size());
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  while (!authorization.empty() && authorization.back() == ' ') authorization.remove_suffix(1);
  return authorization;
}

std::optional<std::string> ApiKeyAuth::Authenticate(std::string_view authorization) const {
  if (!enabled()) return std::string();
  const std::string_view token = BearerToken(authorization);
  const Digest presented = Sha256Of(token.data(), token.size());
  // Every key is compared; the match (if any) is selected without branching on secrets.
  size_t match = digests_.size();
  for (size_t i = 0; i < digests_.size(); ++i) {
    const int differs = CRYPTO_memcmp(presented.data(), digests_[i].data(), presented.size());
    const size_t equal_mask = static_cast<size_t>(0) - static_cast<size_t>(differs == 0);
    match = (i & equal_mask) | (match & ~equal_mask);
  }
  if (token.empty() || match == digests_.size()) return std::nullopt;
  return tenants_[match];
}

}  // namespace kvserve
