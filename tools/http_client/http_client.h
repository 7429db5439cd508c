// The one HTTP/1.1 client of the tools (`kvserve bench-serve`, `kvserve soak`): blocking
// keep-alive connections (one per load thread), response bodies handed to a callback as
// they arrive (chunked transfer encoding decoded), requests that can be cut at any byte,
// and an incremental Server-Sent Events parser. Incremental parsers accept input split at
// any byte.
//
// Blocking sockets keep the client cheap: a thread waits in recv() and wakes only when bytes
// arrive, so the load generator takes little CPU from a server on the same cores.
// Each object is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/http_client/tls_session.h"

namespace kvserve::bench {

// http[s]://host[:port][/base]. The base path (without a trailing '/') prefixes every target.
struct Url {
  std::string host;
  int port = 80;
  std::string base_path;
  bool tls = false;  // https: tls_session.h says how the server is verified
  bool verify_peer = true;  // https: false only to probe one's own server (kvserve healthcheck)
};
// INVALID_ARGUMENT for anything but http:// and https:// URLs.
[[nodiscard]] StatusOr<Url> ParseUrl(std::string_view text);

// Transfer-Encoding: chunked, decoded incrementally.
class ChunkedDecoder {
 public:
  // Appends the payload bytes found in `in` to *out. False on malformed input (then the
  // decoder stays failed).
  [[nodiscard]] bool Feed(std::string_view in, std::string* out);
  // The terminating zero-size chunk (and its trailer) has been read.
  [[nodiscard]] bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone, kFailed };
  State state_ = State::kSize;
  std::string line_;        // the size line (or trailer line) so far
  uint64_t remaining_ = 0;  // payload bytes left in the current chunk
};

// text/event-stream: "data:" lines joined by '\n' make an event's data; a blank line ends an
// event; comments (":...") and other fields (event:, id:, retry:) are ignored; lines end in
// "\n", "\r\n" or "\r".
class SseParser {
 public:
  // Calls on_event(data) for every event completed by `bytes`.
  void Feed(std::string_view bytes, const std::function<void(std::string_view data)>& on_event);

 private:
  void Line(std::string_view line, const std::function<void(std::string_view)>& on_event);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_cr_ = false;  // the previous byte was '\r' (a following '\n' belongs to it)
};

struct ResponseHead {
  int status = 0;
  bool chunked = false;
  int64_t content_length = -1;  // -1: not given
  bool close = false;           // the server closes the connection after this response
  std::string content_type;     // as sent ("" when absent)
};
// Parses the status line and header fields (`head` ends before or at the blank line).
[[nodiscard]] StatusOr<ResponseHead> ParseResponseHead(std::string_view head);

// One keep-alive connection. Request() connects when needed, and reconnects once when a
// reused connection turns out to have been closed by the server before answering.
//
// The steps Request() is made of are public too, for a client that stops at any byte (the
// soak's clients that disconnect): Connect, Send (any prefix of FormatRequest's bytes),
// ReadHead, ReadBody (stopping where on_body returns false), Close.
class HttpConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // `timeout_seconds`: the longest wait for a connection or for the next bytes.
  HttpConnection(Url url, double timeout_seconds);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  struct Response {
    int status = 0;
    Clock::time_point sent;  // just before the request's first byte was written
  };
  // Sends `method base+target` with `body` (JSON when non-empty) and `headers` ("Name: value"
  // lines) and passes the decoded body to on_body(status, bytes) as it arrives. UNAVAILABLE for connection
  // failures, timeouts and connections closed before the body ended ("broken stream").
  [[nodiscard]] StatusOr<Response> Request(std::string_view method, std::string_view target,
                                           std::string_view body, const std::vector<std::string>& headers,
                                           const std::function<void(int status, std::string_view)>& on_body);

  // ---- The steps. Errors are UNAVAILABLE; after one, Close() before reusing. ----
  // The request's bytes (Host, Accept, `headers`, and Content-Type/Length for a body or POST).
  [[nodiscard]] std::string FormatRequest(std::string_view method, std::string_view target, std::string_view body,
                                          const std::vector<std::string>& headers) const;
  // (Re)connects.
  [[nodiscard]] Status Connect();
  [[nodiscard]] Status Send(std::string_view bytes);
  // The next response's head (a 100 Continue is skipped).
  [[nodiscard]] StatusOr<ResponseHead> ReadHead();
  // Reads the body of the response `head` describes (de-chunked) and passes each piece to
  // on_body; when it returns false, reading stops there (then Close: the rest is unread).
  // Closes the connection when the server does (a body delimited by the close, or
  // head.close once the body is complete).
  [[nodiscard]] Status ReadBody(const ResponseHead& head, const std::function<bool(std::string_view)>& on_body);
  void Close();
  [[nodiscard]] bool open() const { return fd_ >= 0; }

 private:
  // One recv() into buffer_: true when bytes arrived, false when the server closed.
  [[nodiscard]] StatusOr<bool> Fill();
  // One attempt; *nothing_received tells a stale keep-alive connection from a real failure.
  StatusOr<Response> Attempt(const std::string& request, const std::function<void(int status, std::string_view)>& on_body,
                             bool* nothing_received);

  Url url_;
  double timeout_seconds_;
  int fd_ = -1;
  std::unique_ptr<TlsSession> tls_;  // https: over fd_
  std::string buffer_;        // received bytes not yet consumed
  int64_t bytes_received_ = 0;  // since the last Connect
};

}  // namespace kvserve::bench
