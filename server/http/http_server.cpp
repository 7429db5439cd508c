// HttpServer over Boost.Beast: an acceptor and `http_threads` threads running one io_context;
// each connection is a Connection object on its own strand (no thread per connection).
//
// A connection's life, all on its strand:
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
//   -> keep-alive: back to the start; otherwise shut down sending and drain the client's
//      remaining input for a moment (so it reads the reply instead of a reset), then close.
// Stop(): stops accepting, closes connections that are between requests, lets the others
// finish their response (the engine was drained first), then stops the threads.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "server/http/http_server.h"
#include "server/http/http_framing.h"
#include "server/http/http_router.h"
#include "server/http/openai_format.h"
#include "server/api/session_header.h"

namespace kvserve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxPipelinedBytes = 64 << 10;       // stop watching a client that sends more
constexpr size_t kMaxLingerBytes = 64 << 20;          // input drained before closing
constexpr auto kLingerTimeout = std::chrono::seconds(1);
constexpr auto kStopDeadline = std::chrono::seconds(5);
constexpr int kMaxPendingWork = 256;                  // POST requests queued for the workers

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

class Connection;

// What every connection shares: the context, the router, the worker pool (owned by the
// server, which outlives the connections' use of it) and the registry Stop() walks.
struct ServerShared {
  ServerShared(ServerContext* c, net::thread_pool* w) : ctx(c), router(c), workers(w) {}
  ServerContext* ctx;
  HttpRouter router;
  net::thread_pool* workers;
  std::atomic<int> pending_work{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket&& socket, std::shared_ptr<ServerShared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", peer.address().to_string(), peer.port());
  }
  ~Connection() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->connections.erase(this);
  }

  void Start() { ReadRequest(/*first=*/true); }
  net::any_io_executor get_executor() { return stream_.get_executor(); }

  // Server stop: close now when between requests, else after the current response.
  void OnServerStop() {
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
    stream_.expires_after(Millis(options().idle_timeout_seconds));
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->buffer_.commit(n);
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    state_ = State::kReadingRequest;
    request_start_ = Clock::now();
    stream_.expires_after(Millis(options().header_timeout_seconds));
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
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
      stream_.expires_after(Millis(options().write_timeout_seconds));
      net::async_write(stream_, net::buffer(continue_), [self = shared_from_this()](beast::error_code wec, size_t) {
        if (wec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    if (parser_->is_done()) return OnRequest();
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(Millis(options().header_timeout_seconds));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
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
    net::post(*shared_->workers, [self = shared_from_this(), info = std::move(info)]() mutable {
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
    notifier->connection = weak_from_this();
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
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
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
    stream_.expires_after(Millis(options().write_timeout_seconds));
    http::async_write(stream_, *reply_, [self = shared_from_this()](beast::error_code ec, size_t) {
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
    stream_.expires_after(Millis(options().write_timeout_seconds));
    net::async_write(stream_, net::buffer(writing_), [self = shared_from_this()](beast::error_code ec, size_t) {
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
      stream_.socket().cancel(ec);
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
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    stream_.expires_after(kLingerTimeout);
    Linger();
  }

  void Linger() {
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
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
    stream_.close();
  }

  beast::tcp_stream stream_;
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
  std::string continue_;
  std::string method_ = "-";
  std::string route_ = "-";
  std::string request_id_;
  Clock::time_point request_start_ = Clock::now();
};

class BeastHttpServer final : public HttpServer {
 public:
  explicit BeastHttpServer(ServerContext* ctx)
      : workers_(static_cast<size_t>(std::max(2, ctx->options.http_threads))),
        shared_(std::make_shared<ServerShared>(ctx, &workers_)), acceptor_(net::make_strand(ioc_)),
        retry_timer_(acceptor_.get_executor()), work_(net::make_work_guard(ioc_)) {}
  ~BeastHttpServer() override { Stop(); }

  Status Listen() {
    const ServerOptions& o = shared_->ctx->options;
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(o.host, std::to_string(o.http_port), tcp::resolver::passive, ec);
    if (ec || endpoints.empty()) {
      return InvalidArgumentError(fmt::format("cannot resolve host '{}': {}", o.host, ec.message()));
    }
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return UnavailableError(fmt::format("cannot listen on {}:{}: {}", o.host, o.http_port, ec.message()));
    port_ = acceptor_.local_endpoint().port();
    return OkStatus();
  }

  void Run() {
    Accept();
    const int n = std::max(1, shared_->ctx->options.http_threads);
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        for (;;) {
          try {
            ioc_.run();
            return;
          } catch (const std::exception& e) {
            LOG_ERROR("HTTP handler failed: {}", e.what());
          }
        }
      });
    }
  }

  int port() const override { return port_; }

  void Stop() override {
    std::call_once(stop_once_, [this] {
      shared_->stopping = true;
      net::post(acceptor_.get_executor(), [this] {
        beast::error_code ec;
        acceptor_.close(ec);
        retry_timer_.cancel();
      });
      std::vector<std::shared_ptr<Connection>> live;
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        for (auto& [ptr, weak] : shared_->connections) {
          if (auto c = weak.lock()) live.push_back(std::move(c));
        }
      }
      // Outside the lock: dropping the last reference runs ~Connection, which takes it.
      for (std::shared_ptr<Connection>& c : live) {
        net::post(c->get_executor(), [c] { c->OnServerStop(); });
      }
      live.clear();
      const auto deadline = Clock::now() + kStopDeadline;
      while (Clock::now() < deadline) {
        {
          std::lock_guard<std::mutex> lock(shared_->mu);
          if (shared_->connections.empty()) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      workers_.join();  // handlers still running finish; they post to the strands below
      work_.reset();
      ioc_.stop();
      for (std::thread& t : threads_) t.join();
    });
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // E.g. out of file descriptors: try again shortly rather than spin.
        LOG_WARN("accept failed: {}", ec.message());
        retry_timer_.expires_after(std::chrono::milliseconds(100));
        retry_timer_.async_wait([this](beast::error_code tec) {
          if (!tec) Accept();
        });
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);  // SSE deltas are small: no Nagle delay
      auto connection = std::make_shared<Connection>(std::move(socket), shared_);
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        shared_->connections.emplace(connection.get(), connection);
      }
      connection->Start();
      Accept();
    });
  }

  net::io_context ioc_;
  net::thread_pool workers_;  // HttpRouter::Handle for POST requests
  std::shared_ptr<ServerShared> shared_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::once_flag stop_once_;
};

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(ServerContext* ctx) {
  auto server = std::make_unique<BeastHttpServer>(ctx);
  RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace kvserve
