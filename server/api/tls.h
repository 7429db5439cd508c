// TLS for a server exposed without a gateway: the certificate chain, its private key and
// (for mutual TLS) the CA that client certificates must chain to, read and checked once at
// start-up, then handed as PEM to both front ends (Beast over OpenSSL, gRPC's SSL
// credentials), so HTTPS and gRPC over TLS present the same certificate.
#pragma once

#include <string>

#include "common/status.h"

namespace kvserve {

// The files `kvserve serve` names (--tls-cert-file, --tls-key-file, --tls-client-ca-file).
struct TlsFiles {
  std::string cert_file;       // PEM: the server certificate, then its intermediates
  std::string key_file;        // PEM: its private key (unencrypted)
  std::string client_ca_file;  // PEM: CA certificates; set: clients must present a certificate
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty(); }
};

struct TlsMaterial {
  std::string cert_chain_pem;
  std::string key_pem;
  std::string client_ca_pem;  // empty: no client certificate is requested
  bool enabled() const { return !cert_chain_pem.empty(); }
  bool mutual() const { return !client_ca_pem.empty(); }
};

// Reads and checks the files: both the certificate and the key are given, they parse, the
// key belongs to the certificate, the client CA file holds at least one certificate.
// INVALID_ARGUMENT naming the flag and the file otherwise. A certificate outside its validity
// period is accepted with a warning in the log (clients will refuse it; the operator may be
// replacing it). Nothing given: an empty material (TLS off).
[[nodiscard]] StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files);

}  // namespace kvserve
