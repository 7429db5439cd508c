// A connection of HttpServer: one Connection object on its own strand (no thread per
// connection), over plain TCP or TLS (Stream: beast::tcp_stream or an ssl_stream over one).
//
// A connection's life, all on its strand:
//   [HTTPS: detect TLS (plain HTTP: a 400 and close), handshake (header timeout)] ->
//   wait for the first byte (idle timeout; a new connection gets the header timeout) ->
//   read the header (header timeout; 431 over the header limit, 413 when Content-Length is
//   over the body limit) -> check the framing (RFC 9112; else 400/501 and close: see
//   FramingError) -> answer "Expect: 100-continue" -> read the body (413) ->
//   HttpRouter::Handle (POST requests, which may parse and tokenize megabytes, on the worker
//   pool, so the I/O threads keep answering health checks and streams; at most
//   kMaxPendingWork of them queued, else 503) -> either write the reply, or run a
//   GenerationJob:
//     * the job's listener (engine thread) posts OnJobOutput to the strand, at most one post
//       outstanding; OnJobOutput polls the job and queues bytes; one write at a time, and
//       whatever queued meanwhile goes out in the next write (coalescing);
//     * SSE is sent with chunked transfer encoding so the connection stays reusable;
//     * while the job runs, a read on the socket watches for the client going away (EOF or
//       error -> Engine::Abort); a write stalled longer than write_timeout aborts too;
//   -> keep-alive: back to the start; otherwise shut down sending (HTTPS: close_notify) and
//      drain the client's remaining input for a moment (so it reads the reply instead of a
//      reset), then close.
#include "server/http/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <type_traits>

#include "common/log.h"
#include "server/http/http_framing.h"
#include "server/http/openai_format.h"
#include "server/api/session_header.h"

namespace kvserve::http_internal {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxPipelinedBytes = 64 << 10;       // stop watching a client that sends more
constexpr size_t kMaxLingerBytes = 64 << 20;          // input drained before closing
constexpr auto kLingerTimeout = std::chrono::seconds(1);
constexpr int kMaxPendingWork = 256;                  // POST requests queued for the workers

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

template <class Stream>
class Connection final : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <class... StreamArgs>
  Connection(std::shared_ptr<ServerShared> shared, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...), shared_(std::move(shared)) {
    beast::error_code ec;
    const tcp::endpoint peer = Tcp().socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", peer.address().to_string(), peer.port());
  }
  ~Connection() override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->connections.erase(this);
  }

  void Start() {
    if constexpr (kTls) {
      // The TLS handshake counts against the header timeout, like the request it carries.
      state_ = State::kReadingRequest;
      Tcp().expires_after(Millis(options().header_timeout_seconds));
      beast::async_detect_ssl(Tcp(), buffer_, [self = this->shared_from_this()](beast::error_code ec, bool tls) {
        self->OnDetected(ec, tls);
      });
    } else {
      ReadRequest(/*first=*/true);
    }
  }
  net::any_io_executor executor() override { return stream_.get_executor(); }

  void OnServerStop() override {
    closing_ = true;
    if (state_ == State::kWaitingForRequest || state_ == State::kReadingRequest) Close();
  }

  // A job's output arrived (posted by its listener).
  void OnJobOutput() {
    if (!job_ || state_ != State::kResponding) return;
    // --profile: formatting the SSE chunks and starting their write (the send happens here).
    Profiler::ThreadCpuScope profile(shared_->ctx->profiler, ProfileOp::kNetworkWrite);
    GenerationJob::Output out = job_->Poll();
    if (out.reply) {
      // The whole response: a client that reads it and hangs up before the write's completion
      // runs completed its request (OnWatch), it did not abandon it.
      job_finished_ = out.finished;
      WriteReply(std::move(*out.reply));
      return;
    }
    if (out.start) {
      chunked_ = version_ >= 11;
      out_ += "HTTP/1.1 200 OK\r\nServer: kvserve\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
      out_ += fmt::format("X-Request-Id: {}\r\n", job_->id());
      if (chunked_) out_ += "Transfer-Encoding: chunked\r\n";
      if (!chunked_ || !KeepAlive()) out_ += "Connection: close\r\n";
      out_ += "\r\n";
      if (!chunked_) keep_alive_ = false;
    }
    if (!out.body.empty()) {
      if (chunked_) out_ += fmt::format("{:x}\r\n", out.body.size());
      out_ += out.body;
      if (chunked_) out_ += "\r\n";
    }
    if (out.finished) {
      if (chunked_) out_ += "0\r\n\r\n";
      job_finished_ = true;
    }
    Flush();
  }

 private:
  enum class State { kWaitingForRequest, kReadingRequest, kResponding, kClosing };

  // Draining: answer, then close, so clients reconnect (to another replica).
  bool KeepAlive() const { return keep_alive_ && !closing_ && !shared_->stopping && !shared_->ctx->draining; }
  const ServerOptions& options() const { return shared_->ctx->options; }

  // The transport under any TLS: timeouts, cancel, shutdown and close act on it.
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // ---------------------------------------------------------------- TLS (HTTPS only)

  void OnDetected(beast::error_code ec, bool tls) {
    if (ec) return Close();
    if (!tls) return RefusePlainHttp();
    if constexpr (kTls) {
      stream_.async_handshake(ssl::stream_base::server, buffer_.data(),
                              [self = this->shared_from_this()](beast::error_code hec, size_t used) {
                                if (hec) {
                                  LOG_DEBUG("TLS handshake with {} failed: {}", self->remote_, hec.message());
                                  return self->Close();
                                }
                                self->buffer_.consume(used);
                                self->ReadRequest(/*first=*/true);
                              });
    }
  }

  // A client that sent plain HTTP to the HTTPS port gets a plain-HTTP 400 saying so (as
  // nginx does) instead of a reset it cannot explain.
  void RefusePlainHttp() {
    state_ = State::kClosing;
    const HttpReply reply =
        ErrorReply(ApiError{InvalidArgumentError("this port serves HTTPS: use an https:// URL"), "", "", 400});
    continue_ = fmt::format("HTTP/1.1 400 Bad Request\r\nServer: kvserve\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
                            "Connection: close\r\n\r\n{}",
                            reply.content_type, reply.body.size(), reply.body);
    Tcp().expires_after(Millis(options().write_timeout_seconds));
    net::async_write(Tcp(), net::buffer(continue_), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->ShutdownSendAndLinger();
    });
  }

  // ---------------------------------------------------------------- reading a request

  void ReadRequest(bool first) {
    state_ = State::kWaitingForRequest;
    if (closing_ || shared_->stopping) return Close();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
    parser_->body_limit(options().max_body_bytes);
    version_ = 11;
    keep_alive_ = true;
    client_gone_ = false;
    logged_ = false;
    if (first || buffer_.size() > 0) return ReadHeader();
    // Between keep-alive requests: the idle timeout applies until the next byte arrives.
    Tcp().expires_after(Millis(options().idle_timeout_seconds));
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->buffer_.commit(n);
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    state_ = State::kReadingRequest;
    request_start_ = Clock::now();
    Tcp().expires_after(Millis(options().header_timeout_seconds));
    http::async_read_header(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->OnHeader(ec);
    });
  }

  // Errors while reading a request: a reply for protocol errors, silence for closed/slow
  // clients. Returns true when `ec` was an error.
  bool HandleReadError(beast::error_code ec) {
    if (!ec) return false;
    if (ec == http::error::header_limit) {
      ProtocolError(431, "the request header is larger than the limit");
    } else if (ec == http::error::body_limit) {
      ProtocolError(413, fmt::format("the request body is larger than the limit of {} bytes", options().max_body_bytes));
    } else if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
               ec == net::error::operation_aborted || ec == net::error::connection_reset || state_ == State::kClosing) {
      Close();
    } else {
      ProtocolError(400, "malformed HTTP request: " + ec.message());
    }
    return true;
  }

  void OnHeader(beast::error_code ec) {
    if (HandleReadError(ec)) return;
    const auto& req = parser_->get();
    version_ = req.version();
    if (std::optional<std::pair<int, std::string>> error = FramingError(req.base())) {
      return ProtocolError(error->first, error->second);
    }
    if (beast::iequals(req[http::field::expect], "100-continue") && !parser_->is_done()) {
      continue_ = "HTTP/1.1 100 Continue\r\n\r\n";
      Tcp().expires_after(Millis(options().write_timeout_seconds));
      net::async_write(stream_, net::buffer(continue_), [self = this->shared_from_this()](beast::error_code wec, size_t) {
        if (wec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    if (parser_->is_done()) return OnRequest();
    ReadBody();
  }

  void ReadBody() {
    Tcp().expires_after(Millis(options().header_timeout_seconds));
    http::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (self->HandleReadError(ec)) return;
      self->OnRequest();
    });
  }

  // Answers and closes the connection: nothing after the error is read as a request.
  void ProtocolError(int status, const std::string& message) {
    keep_alive_ = false;
    closing_ = true;
    method_ = "-";
    route_ = "-";
    const Status why = status == 501 ? UnimplementedError(message) : InvalidArgumentError(message);
    WriteReply(ErrorReply(ApiError{why, "", "", status}));
  }

  // ---------------------------------------------------------------- handling it

  void OnRequest() {
    state_ = State::kResponding;
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    HttpRequestInfo info;
    info.method = std::string(req.method_string());
    info.target = std::string(req.target());
    info.authorization = std::string(req[http::field::authorization]);
    info.session_id = std::string(req[beast::string_view(kSessionHeader.data(), kSessionHeader.size())]);
    info.body = std::move(req.body());
    info.remote = remote_;
    method_ = info.method;
    if (!HttpRouter::IsHeavy(info)) return OnRouted(shared_->router.Handle(info));
    if (shared_->pending_work.fetch_add(1) >= kMaxPendingWork) {
      --shared_->pending_work;
      route_ = info.target;
      return WriteReply(ErrorReply(ApiError{UnavailableError("the server is busy; retry shortly"), "",
                                            "service_unavailable", 0}));
    }
    net::post(*shared_->workers, [self = this->shared_from_this(), info = std::move(info)]() mutable {
      HttpRouter::Result result = self->shared_->router.Handle(info);
      --self->shared_->pending_work;
      net::post(self->stream_.get_executor(),
                [self, result = std::move(result)]() mutable { self->OnRouted(std::move(result)); });
    });
  }

  void OnRouted(HttpRouter::Result result) {
    if (state_ == State::kClosing) {  // the server stopped meanwhile
      if (result.job) result.job->Abort();
      return;
    }
    route_ = result.route;
    quiet_ = result.quiet;
    request_id_ = result.id;
    if (result.reply) return WriteReply(std::move(*result.reply));
    StartJob(std::move(result.job));
  }

  void StartJob(std::unique_ptr<GenerationJob> job) {
    job_ = std::move(job);
    job_finished_ = false;
    chunked_ = false;
    StartWatch();
    struct Notifier {
      net::any_io_executor executor;
      std::weak_ptr<Connection> connection;
      std::atomic<bool> posted{false};
    };
    auto notifier = std::make_shared<Notifier>();
    notifier->executor = stream_.get_executor();
    notifier->connection = this->weak_from_this();
    job_->SetListener([notifier] {
      if (notifier->posted.exchange(true)) return;
      net::post(notifier->executor, [notifier] {
        notifier->posted = false;
        if (auto c = notifier->connection.lock()) c->OnJobOutput();
      });
    });
  }

  // Reads while a job runs: EOF or an error means the client went away.
  void StartWatch() {
    watching_ = true;
    Tcp().expires_never();
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->OnWatch(ec, n);
    });
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);  // a pipelined request: kept for later
    if (state_ == State::kClosing) return;
    if (response_done_) return ContinueAfterResponse();
    if (ec && job_finished_) {
      // The client closed after the last bytes were handed to the kernel (e.g. it read
      // [DONE]): nothing to abort; the write in flight completes the response.
      keep_alive_ = false;
      return;
    }
    if (ec) return ClientGone();
    if (buffer_.size() < kMaxPipelinedBytes) StartWatch();
  }

  // ---------------------------------------------------------------- writing the response

  void WriteReply(HttpReply reply) {
    state_ = State::kResponding;
    reply_status_ = reply.status;
    reply_.emplace();
    reply_->version(version_);
    reply_->result(static_cast<unsigned>(reply.status));
    reply_->set(http::field::server, "kvserve");
    reply_->set(http::field::content_type, reply.content_type);
    if (!request_id_.empty()) reply_->set("X-Request-Id", request_id_);
    for (const auto& [name, value] : reply.headers) reply_->set(name, value);
    reply_->body() = std::move(reply.body);
    reply_->keep_alive(KeepAlive());
    reply_->prepare_payload();
    keep_alive_ = reply_->keep_alive();
    Tcp().expires_after(Millis(options().write_timeout_seconds));
    http::async_write(stream_, *reply_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->reply_.reset();
      if (ec) return self->job_ ? self->ClientGone() : self->Close();
      self->ResponseComplete();
    });
  }

  void Flush() {
    if (write_in_flight_ || out_.empty() || state_ != State::kResponding) return;
    writing_.swap(out_);
    out_.clear();
    write_in_flight_ = true;
    Tcp().expires_after(Millis(options().write_timeout_seconds));
    net::async_write(stream_, net::buffer(writing_), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->write_in_flight_ = false;
      self->writing_.clear();
      if (self->state_ == State::kClosing) return;
      if (ec) return self->ClientGone();  // includes a write stalled past the timeout
      if (!self->out_.empty()) return self->Flush();
      if (self->job_finished_) self->ResponseComplete();
    });
  }

  void Log(int status) {
    if (logged_) return;
    logged_ = true;
    RequestRecord r;
    r.id = request_id_.empty() ? "-" : request_id_;
    r.method = method_;
    r.route = route_;
    r.remote = remote_;
    r.status = status;
    r.duration_s = std::chrono::duration<double>(Clock::now() - request_start_).count();
    r.quiet = quiet_;
    r.job = job_.get();
    r.client_gone = client_gone_;
    LogRequest(r);
  }

  void ResponseComplete() {
    Log(job_ ? job_->http_status() : reply_status_);
    job_.reset();
    request_id_.clear();
    if (watching_) {
      response_done_ = true;  // OnWatch continues once the read is cancelled
      beast::error_code ec;
      Tcp().socket().cancel(ec);
      return;
    }
    ContinueAfterResponse();
  }

  void ContinueAfterResponse() {
    response_done_ = false;
    if (!KeepAlive()) return GracefulClose();
    ReadRequest(/*first=*/false);
  }

  void ClientGone() {
    if (state_ == State::kClosing) return;
    client_gone_ = true;
    if (job_) {
      job_->Abort();
      Log(499);  // nginx's "client closed request"
      job_.reset();
    }
    Close();
  }

  // ---------------------------------------------------------------- closing

  void GracefulClose() {
    state_ = State::kClosing;
    if constexpr (kTls) {
      // close_notify, so the client can tell the end from a truncation; bounded like the linger.
      Tcp().expires_after(kLingerTimeout);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->Close(); });
    } else {
      ShutdownSendAndLinger();
    }
  }

  void ShutdownSendAndLinger() {
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    Tcp().expires_after(kLingerTimeout);
    Linger();
  }

  void Linger() {
    Tcp().async_read_some(buffer_.prepare(kReadChunk), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->linger_bytes_ += n;
      if (ec || self->linger_bytes_ > kMaxLingerBytes) return self->Close();
      self->Linger();
    });
  }

  void Close() {
    state_ = State::kClosing;
    if (job_) {
      job_->Abort();
      job_.reset();
    }
    Tcp().close();
  }

  Stream stream_;
  std::shared_ptr<ServerShared> shared_;  // outlives the server: handlers may be destroyed last
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> reply_;
  std::unique_ptr<GenerationJob> job_;
  State state_ = State::kWaitingForRequest;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool closing_ = false;
  bool chunked_ = false;
  bool job_finished_ = false;
  bool watching_ = false;
  bool response_done_ = false;
  bool write_in_flight_ = false;
  bool client_gone_ = false;
  bool logged_ = false;
  bool quiet_ = false;
  int reply_status_ = 0;
  size_t linger_bytes_ = 0;
  std::string out_;      // queued bytes (SSE head, chunks)
  std::string writing_;  // bytes of the write in flight
  std::string continue_;  // "100 Continue", or the reply refusing plain HTTP
  std::string method_ = "-";
  std::string route_ = "-";
  std::string request_id_;
  Clock::time_point request_start_ = Clock::now();
};

template <class Stream, class... StreamArgs>
void Register(const std::shared_ptr<ServerShared>& shared, StreamArgs&&... stream_args) {
  auto connection = std::make_shared<Connection<Stream>>(shared, std::forward<StreamArgs>(stream_args)...);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->connections.emplace(connection.get(), connection);
  }
  connection->Start();
}

}  // namespace

void StartConnection(tcp::socket socket, const std::shared_ptr<ServerShared>& shared, ssl::context* tls) {
  if (tls != nullptr) {
    Register<TlsStream>(shared, std::move(socket), *tls);
  } else {
    Register<beast::tcp_stream>(shared, std::move(socket));
  }
}

}  // namespace kvserve::http_internal
