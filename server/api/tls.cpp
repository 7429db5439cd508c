#include "server/api/tls.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "common/log.h"

namespace kvserve {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// The oldest queued OpenSSL error, for messages ("" when none).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return std::string(": ") + text;
}

StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError(fmt::format("{}: cannot read '{}'", flag, path));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) return InvalidArgumentError(fmt::format("{}: '{}' is empty", flag, path));
  return text.str();
}

Bio MemoryBio(const std::string& pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// Every certificate in `pem`, in order.
StatusOr<std::vector<Cert>> ParseCertificates(const char* flag, const std::string& path, const std::string& pem) {
  Bio bio = MemoryBio(pem);
  std::vector<Cert> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the read that ended the loop
  if (certs.empty()) {
    return InvalidArgumentError(fmt::format("{}: '{}' holds no PEM certificate", flag, path));
  }
  return certs;
}

void WarnOutsideValidity(const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    LOG_WARN("--tls-cert-file '{}' has expired; clients will refuse it", path);
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    LOG_WARN("--tls-cert-file '{}' is not valid yet; clients will refuse it", path);
  }
}

}  // namespace

StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files) {
  TlsMaterial out;
  if (!files.enabled()) return out;
  if (files.cert_file.empty() || files.key_file.empty()) {
    return InvalidArgumentError("TLS needs both --tls-cert-file and --tls-key-file");
  }
  ASSIGN_OR_RETURN(out.cert_chain_pem, ReadFile("--tls-cert-file", files.cert_file));
  ASSIGN_OR_RETURN(out.key_pem, ReadFile("--tls-key-file", files.key_file));
  ASSIGN_OR_RETURN(std::vector<Cert> chain, ParseCertificates("--tls-cert-file", files.cert_file, out.cert_chain_pem));
  Bio key_bio = MemoryBio(out.key_pem);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return InvalidArgumentError(fmt::format("--tls-key-file: '{}' holds no unencrypted PEM private key{}",
                                            files.key_file, OpenSslError()));
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError(fmt::format("--tls-key-file '{}' is not the key of the certificate in '{}'",
                                            files.key_file, files.cert_file));
  }
  WarnOutsideValidity(files.cert_file, chain.front().get());
  if (!files.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(out.client_ca_pem, ReadFile("--tls-client-ca-file", files.client_ca_file));
    RETURN_IF_ERROR(ParseCertificates("--tls-client-ca-file", files.client_ca_file, out.client_ca_pem).status());
  }
  return out;
}

}  // namespace kvserve
