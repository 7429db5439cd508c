// The client side of TLS for HttpConnection (https:// URLs): OpenSSL over a connected,
// blocking socket whose SO_RCVTIMEO/SO_SNDTIMEO bound every wait. The server's certificate is
// verified against OpenSSL's default CA store, which honours SSL_CERT_FILE / SSL_CERT_DIR (how
// a test or a private CA is trusted), and must name the URL's host (DNS name or IP address).
// One object per connection, used by one thread at a time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

typedef struct ssl_st SSL;

namespace kvserve::bench {

class TlsSession {
 public:
  TlsSession() = default;
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // The handshake over `fd` (not owned) for `host`; `verify` false accepts any certificate.
  // UNAVAILABLE naming the reason (e.g. the certificate verification error) when it fails.
  [[nodiscard]] Status Handshake(int fd, const std::string& host, bool verify = true);
  [[nodiscard]] Status Write(std::string_view bytes);
  // Bytes read into `out` (up to `size`); 0 when the server closed the connection.
  [[nodiscard]] StatusOr<size_t> Read(char* out, size_t size);

 private:
  [[nodiscard]] Status Failure(const char* what, int ret);
  SSL* ssl_ = nullptr;
};

}  // namespace kvserve::bench
