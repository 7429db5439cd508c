#include "tools/http_client/tls_session.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace kvserve::bench {
namespace {

// One client context for the process: TLS 1.2+, peer verification against the default store.
SSL_CTX* ClientContext() {
  static SSL_CTX* const ctx = [] {
    SSL_CTX* c = SSL_CTX_new(TLS_client_method());
    if (c == nullptr) return c;
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    // A server that closes without close_notify ends the stream, as over plain TCP (OpenSSL 3
    // otherwise reports an error; a response cut short is still told by its framing).
    SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    SSL_CTX_set_default_verify_paths(c);
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
    return c;
  }();
  return ctx;
}

std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    text += text.empty() ? buffer : std::string("; ") + buffer;
  }
  return text;
}

}  // namespace

TlsSession::~TlsSession() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

Status TlsSession::Handshake(int fd, const std::string& host, bool verify) {
  SSL_CTX* ctx = ClientContext();
  if (ctx == nullptr) return UnavailableError("cannot create a TLS client context: " + OpenSslErrors());
  ssl_ = SSL_new(ctx);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd) != 1) return UnavailableError("cannot set up TLS: " + OpenSslErrors());
  in6_addr ip;
  const bool is_ip = inet_pton(AF_INET, host.c_str(), &ip) == 1 || inet_pton(AF_INET6, host.c_str(), &ip) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  if (!verify) {
    SSL_set_verify(ssl_, SSL_VERIFY_NONE, nullptr);
  } else if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  }
  if (!is_ip) SSL_set_tlsext_host_name(ssl_, host.c_str());  // SNI
  errno = 0;
  const int ret = SSL_connect(ssl_);
  if (ret == 1) return OkStatus();
  const long result = SSL_get_verify_result(ssl_);
  if (result != X509_V_OK) {
    ERR_clear_error();
    return UnavailableError(fmt::format("TLS: the server's certificate was refused: {}",
                                        X509_verify_cert_error_string(result)));
  }
  return Failure("TLS handshake", ret);
}

Status TlsSession::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    errno = 0;
    const int ret = SSL_write(ssl_, bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), 1 << 30)));
    if (ret <= 0) return Failure("TLS send", ret);
    bytes.remove_prefix(static_cast<size_t>(ret));
  }
  return OkStatus();
}

StatusOr<size_t> TlsSession::Read(char* out, size_t size) {
  errno = 0;
  const int ret = SSL_read(ssl_, out, static_cast<int>(std::min<size_t>(size, 1 << 30)));
  if (ret > 0) return static_cast<size_t>(ret);
  const int error = SSL_get_error(ssl_, ret);
  // close_notify, or a peer that closed the TCP connection without one: the end either way.
  if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && errno == 0)) {
    ERR_clear_error();
    return size_t{0};
  }
  RETURN_IF_ERROR(Failure("TLS receive", ret));
  return size_t{0};
}

Status TlsSession::Failure(const char* what, int ret) {
  const int error = SSL_get_error(ssl_, ret);
  const int saved_errno = errno;
  std::string detail = OpenSslErrors();
  if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) return UnavailableError(fmt::format("{}: timed out", what));
    if (detail.empty()) detail = saved_errno != 0 ? std::strerror(saved_errno) : "connection closed";
  }
  return UnavailableError(fmt::format("{} failed: {}", what, detail.empty() ? fmt::format("SSL error {}", error) : detail));
}

}  // namespace kvserve::bench
