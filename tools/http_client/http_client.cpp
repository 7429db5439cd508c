// Blocking HTTP/1.1 client, chunked decoding and SSE parsing for the tools.
#include "tools/http_client/http_client.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

namespace kvserve::bench {
namespace {

constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxChunkLine = 4 << 10;
constexpr size_t kReadBytes = 64 << 10;

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool IContains(std::string_view haystack, std::string_view needle) {
  if (needle.size() > haystack.size()) return false;
  for (size_t i = 0; i + needle.size() <= haystack.size(); ++i) {
    if (IEquals(haystack.substr(i, needle.size()), needle)) return true;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

StatusOr<Url> ParseUrl(std::string_view text) {
  Url url;
  std::string_view rest = text;
  if (rest.starts_with("https://")) {
    url.tls = true;
    url.port = 443;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return InvalidArgumentError(fmt::format("--url '{}': only http:// and https:// URLs are supported", text));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    url.base_path = std::string(path);
  }
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError(fmt::format("--url '{}': bad IPv6 host", text));
    url.host = std::string(authority.substr(1, close - 1));
    colon = authority.find(':', close);
  } else {
    url.host = std::string(authority.substr(0, colon));
  }
  if (colon != std::string_view::npos) {
    const std::string_view port = authority.substr(colon + 1);
    const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), url.port);
    if (ec != std::errc() || ptr != port.data() + port.size() || url.port <= 0 || url.port > 65535) {
      return InvalidArgumentError(fmt::format("--url '{}': bad port '{}'", text, port));
    }
  }
  if (url.host.empty()) return InvalidArgumentError(fmt::format("--url '{}': no host", text));
  return url;
}

// ------------------------------------------------------------------ chunked decoding

bool ChunkedDecoder::Feed(std::string_view in, std::string* out) {
  size_t i = 0;
  while (i < in.size() && state_ != State::kFailed && state_ != State::kDone) {
    switch (state_) {
      case State::kSize:
      case State::kTrailer: {
        const size_t nl = in.find('\n', i);
        const size_t end = nl == std::string_view::npos ? in.size() : nl;
        line_.append(in.substr(i, end - i));
        if (line_.size() > kMaxChunkLine) {
          state_ = State::kFailed;
          break;
        }
        i = end;
        if (nl == std::string_view::npos) break;
        ++i;  // the '\n'
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (state_ == State::kTrailer) {
          if (line_.empty()) state_ = State::kDone;  // a trailer field otherwise: ignored
          line_.clear();
          break;
        }
        std::string_view size = line_;
        size = size.substr(0, size.find(';'));  // chunk extensions
        size = Trim(size);
        uint64_t n = 0;
        const auto [ptr, ec] = std::from_chars(size.data(), size.data() + size.size(), n, 16);
        line_.clear();
        if (size.empty() || ec != std::errc() || ptr != size.data() + size.size()) {
          state_ = State::kFailed;
          break;
        }
        remaining_ = n;
        state_ = n == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
        out->append(in.substr(i, take));
        i += take;
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {  // the CRLF after the payload
        const char c = in[i++];
        if (c == '\n') {
          state_ = State::kSize;
        } else if (c != '\r') {
          state_ = State::kFailed;
        }
        break;
      }
      case State::kDone:
      case State::kFailed:
        break;
    }
  }
  return state_ != State::kFailed;
}

// ------------------------------------------------------------------ server-sent events

void SseParser::Feed(std::string_view bytes, const std::function<void(std::string_view)>& on_event) {
  size_t i = 0;
  if (last_cr_ && !bytes.empty() && bytes.front() == '\n') ++i;  // "\r\n" split across calls
  last_cr_ = false;
  while (i < bytes.size()) {
    const size_t eol = bytes.find_first_of("\r\n", i);
    if (eol == std::string_view::npos) {
      line_.append(bytes.substr(i));
      return;
    }
    line_.append(bytes.substr(i, eol - i));
    i = eol + 1;
    if (bytes[eol] == '\r') {
      if (i < bytes.size()) {
        if (bytes[i] == '\n') ++i;
      } else {
        last_cr_ = true;
      }
    }
    std::string line;
    line.swap(line_);
    Line(line, on_event);
  }
}

void SseParser::Line(std::string_view line, const std::function<void(std::string_view)>& on_event) {
  if (line.empty()) {  // end of an event
    if (has_data_) on_event(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

// ------------------------------------------------------------------ response head

StatusOr<ResponseHead> ParseResponseHead(std::string_view head) {
  ResponseHead r;
  const size_t eol = head.find('\n');
  std::string_view status_line = Trim(head.substr(0, eol));
  // HTTP/1.1 200 OK
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return UnavailableError(fmt::format("malformed HTTP status line '{}'", status_line));
  }
  const std::string_view code = status_line.substr(9, 3);
  const auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), r.status);
  if (ec != std::errc() || ptr != code.data() + code.size()) {
    return UnavailableError(fmt::format("malformed HTTP status line '{}'", status_line));
  }
  r.close = status_line.starts_with("HTTP/1.0");  // unless keep-alive is announced
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 1);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = Trim(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = Trim(line.substr(0, colon));
    const std::string_view value = Trim(line.substr(colon + 1));
    if (IEquals(name, "content-length")) {
      int64_t n = -1;
      const auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (e != std::errc() || p != value.data() + value.size() || n < 0) {
        return UnavailableError(fmt::format("malformed Content-Length '{}'", value));
      }
      r.content_length = n;
    } else if (IEquals(name, "content-type")) {
      r.content_type = std::string(value);
    } else if (IEquals(name, "transfer-encoding")) {
      r.chunked = IContains(value, "chunked");
    } else if (IEquals(name, "connection")) {
      if (IContains(value, "close")) r.close = true;
      if (IContains(value, "keep-alive")) r.close = false;
    }
  }
  if (r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200)) r.content_length = 0;
  return r;
}

// ------------------------------------------------------------------ connection

HttpConnection::HttpConnection(Url url, double timeout_seconds)
    : url_(std::move(url)), timeout_seconds_(timeout_seconds) {}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  tls_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

Status HttpConnection::Connect() {
  Close();
  bytes_received_ = 0;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url_.port);
  if (int rc = ::getaddrinfo(url_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return UnavailableError(fmt::format("cannot resolve '{}': {}", url_.host, gai_strerror(rc)));
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_seconds_);
  tv.tv_usec = static_cast<suseconds_t>((timeout_seconds_ - std::floor(timeout_seconds_)) * 1e6);
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // also bounds connect()
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) return UnavailableError(fmt::format("cannot connect to {}:{}: {}", url_.host, url_.port, error));
  if (url_.tls) {
    tls_ = std::make_unique<TlsSession>();
    if (Status s = tls_->Handshake(fd_, url_.host, url_.verify_peer); !s.ok()) {
      Close();
      return s;
    }
  }
  return OkStatus();
}

std::string HttpConnection::FormatRequest(std::string_view method, std::string_view target, std::string_view body,
                                          const std::vector<std::string>& headers) const {
  std::string request = fmt::format("{} {}{} HTTP/1.1\r\nHost: {}:{}\r\nAccept: */*\r\n", method, url_.base_path,
                                    target, url_.host, url_.port);
  for (const std::string& h : headers) request += h + "\r\n";
  if (!body.empty()) request += "Content-Type: application/json\r\n";
  if (!body.empty() || method == "POST") request += fmt::format("Content-Length: {}\r\n", body.size());
  request += "\r\n";
  request.append(body);
  return request;
}

Status HttpConnection::Send(std::string_view bytes) {
  if (fd_ < 0) return UnavailableError("send on a closed connection");
  if (tls_) return tls_->Write(bytes);
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(fmt::format("send failed: {}", std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

StatusOr<bool> HttpConnection::Fill() {
  if (fd_ < 0) return UnavailableError("read on a closed connection");
  char block[kReadBytes];
  if (tls_) {
    ASSIGN_OR_RETURN(const size_t n, tls_->Read(block, sizeof(block)));
    buffer_.append(block, n);
    bytes_received_ += static_cast<int64_t>(n);
    return n > 0;
  }
  for (;;) {
    const ssize_t n = ::recv(fd_, block, sizeof(block), 0);
    if (n > 0) {
      buffer_.append(block, static_cast<size_t>(n));
      bytes_received_ += n;
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return UnavailableError(fmt::format("timed out after {} s without data", timeout_seconds_));
    }
    return UnavailableError(fmt::format("recv failed: {}", std::strerror(errno)));
  }
}

StatusOr<ResponseHead> HttpConnection::ReadHead() {
  for (;;) {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (buffer_.size() > kMaxHeadBytes) return UnavailableError("response header too large");
      ASSIGN_OR_RETURN(const bool more, Fill());
      if (!more) return UnavailableError("the server closed the connection before answering");
    }
    StatusOr<ResponseHead> head = ParseResponseHead(std::string_view(buffer_).substr(0, end));
    buffer_.erase(0, end + 4);
    if (!head.ok() || head->status != 100) return head;  // 100 Continue: the real head follows
  }
}

Status HttpConnection::ReadBody(const ResponseHead& head, const std::function<bool(std::string_view)>& on_body) {
  constexpr const char* kBroken = "broken stream: the server closed the connection mid-response";
  if (head.chunked) {
    ChunkedDecoder decoder;
    std::string decoded;
    for (;;) {
      decoded.clear();
      const bool fed = decoder.Feed(buffer_, &decoded);
      buffer_.clear();
      if (!fed) return UnavailableError("malformed chunked encoding");
      if (!decoded.empty() && !on_body(decoded)) return OkStatus();
      if (decoder.done()) break;
      ASSIGN_OR_RETURN(const bool more, Fill());
      if (!more) return UnavailableError(kBroken);
    }
  } else if (head.content_length >= 0) {
    for (int64_t left = head.content_length; left > 0;) {
      if (buffer_.empty()) {
        ASSIGN_OR_RETURN(const bool more, Fill());
        if (!more) return UnavailableError(kBroken);
      }
      const size_t take = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buffer_.size())));
      const std::string piece = buffer_.substr(0, take);
      buffer_.erase(0, take);
      left -= static_cast<int64_t>(take);
      if (!on_body(piece)) return OkStatus();
    }
  } else {  // delimited by the server closing the connection
    for (;;) {
      if (!buffer_.empty()) {
        const std::string piece = std::move(buffer_);
        buffer_.clear();
        if (!on_body(piece)) return OkStatus();
      }
      ASSIGN_OR_RETURN(const bool more, Fill());
      if (!more) break;
    }
    Close();
    return OkStatus();
  }
  if (head.close) Close();
  return OkStatus();
}

StatusOr<HttpConnection::Response> HttpConnection::Request(std::string_view method, std::string_view target,
                                                           std::string_view body,
                                                           const std::vector<std::string>& headers,
                                                           const std::function<void(int status, std::string_view)>& on_body) {
  const std::string request = FormatRequest(method, target, body, headers);
  const bool reused = fd_ >= 0;
  bool nothing_received = false;
  StatusOr<Response> r = Attempt(request, on_body, &nothing_received);
  if (!r.ok() && reused && nothing_received) {
    // The server closed the idle keep-alive connection: one retry on a new one.
    Close();
    r = Attempt(request, on_body, &nothing_received);
  }
  if (!r.ok()) Close();
  return r;
}

StatusOr<HttpConnection::Response> HttpConnection::Attempt(const std::string& request,
                                                           const std::function<void(int status, std::string_view)>& on_body,
                                                           bool* nothing_received) {
  *nothing_received = true;
  if (fd_ < 0) RETURN_IF_ERROR(Connect());
  const int64_t received_before = bytes_received_;
  Response response;
  response.sent = Clock::now();
  RETURN_IF_ERROR(Send(request));
  StatusOr<ResponseHead> head = ReadHead();
  *nothing_received = bytes_received_ == received_before;
  if (!head.ok()) return head.status();
  response.status = head->status;
  RETURN_IF_ERROR(ReadBody(*head, [&](std::string_view bytes) {
    on_body(head->status, bytes);
    return true;
  }));
  return response;
}

}  // namespace kvserve::bench
