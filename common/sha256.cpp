// Sha256Hasher (see sha256.h).
#include "common/sha256.h"

#include <openssl/evp.h>

#include "common/check.h"

namespace kvserve {

Sha256Hasher::Sha256Hasher() : ctx_(EVP_MD_CTX_new()) {
  CHECK(ctx_ != nullptr && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1)
      << "SHA-256 init failed";
}

Sha256Hasher::~Sha256Hasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Hasher::Add(const void* data, size_t n) {
  CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1) << "SHA-256 update failed";
}

Sha256Digest Sha256Hasher::Finish() {
  Sha256Digest out{};
  unsigned int n = 0;
  CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &n) == 1 && n == out.size())
      << "SHA-256 final failed";
  return out;
}

Sha256Digest Sha256Of(const void* data, size_t n) {
  Sha256Hasher h;
  h.Add(data, n);
  return h.Finish();
}

std::string Sha256(std::string_view data) {
  const Sha256Digest d = Sha256Of(data.data(), data.size());
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

}  // namespace kvserve
