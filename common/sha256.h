// SHA-256, the one digest kvserve uses: cache block hashes, state records and their
// identities, API key digests, KV event hashes, remembered grammar failures. OpenSSL computes it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental: Add pieces, then Finish once.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Add(const void* data, size_t n);
  void Add(std::string_view s) { Add(s.data(), s.size()); }
  template <typename T>
  void AddValue(const T& v) { Add(&v, sizeof(v)); }
  Sha256Digest Finish();

 private:
  void* ctx_;  // EVP_MD_CTX
};

Sha256Digest Sha256Of(const void* data, size_t n);
// The digest as 32 raw bytes in a string.
std::string Sha256(std::string_view data);
std::string ToHex(std::string_view bytes);

}  // namespace kvserve
