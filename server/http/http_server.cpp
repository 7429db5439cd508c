// HttpServer over Boost.Beast: an acceptor and `http_threads` threads running one io_context;
// connections are http_connection.cpp's (plain TCP, or TLS with --tls-cert-file).
// Stop(): stops accepting, closes connections that are between requests, lets the others
// finish their response (the engine was drained first), then stops the threads.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/error.hpp>
#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "common/log.h"
#include "server/http/http_connection.h"
#include "server/http/http_server.h"

namespace kvserve {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using http_internal::ConnectionBase;
using http_internal::ServerShared;

constexpr auto kStopDeadline = std::chrono::seconds(5);

class BeastHttpServer final : public HttpServer {
 public:
  explicit BeastHttpServer(ServerContext* ctx)
      : workers_(static_cast<size_t>(std::max(2, ctx->options.http_threads) + ctx->options.grammar_compile_slots)),
        shared_(std::make_shared<ServerShared>(ctx, &workers_)), acceptor_(net::make_strand(ioc_)),
        retry_timer_(acceptor_.get_executor()), work_(net::make_work_guard(ioc_)) {}
  ~BeastHttpServer() override { Stop(); }

  // HTTPS when the context has TLS material: TLS 1.2 or later, the certificate chain and key,
  // and with a client CA, a client certificate that chains to it is required.
  Status SetUpTls() {
    const TlsMaterial& m = shared_->ctx->tls;
    if (!m.enabled()) return OkStatus();
    try {
      tls_.emplace(ssl::context::tls_server);
      tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                        ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
      tls_->use_certificate_chain(net::buffer(m.cert_chain_pem));
      tls_->use_private_key(net::buffer(m.key_pem), ssl::context::pem);
      if (m.mutual()) {
        tls_->add_certificate_authority(net::buffer(m.client_ca_pem));
        tls_->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    } catch (const boost::system::system_error& e) {
      tls_.reset();
      return InvalidArgumentError(fmt::format("cannot set up TLS: {}", e.what()));
    }
    return OkStatus();
  }

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
      std::vector<std::shared_ptr<ConnectionBase>> live;
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        for (auto& [ptr, weak] : shared_->connections) {
          if (auto c = weak.lock()) live.push_back(std::move(c));
        }
      }
      // Outside the lock: dropping the last reference runs ~Connection, which takes it.
      for (std::shared_ptr<ConnectionBase>& c : live) {
        net::post(c->executor(), [c] { c->OnServerStop(); });
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
      http_internal::StartConnection(std::move(socket), shared_, tls_ ? &*tls_ : nullptr);
      Accept();
    });
  }

  std::optional<ssl::context> tls_;  // HTTPS; destroyed after the connections' io_context
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
  RETURN_IF_ERROR(server->SetUpTls());
  RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace kvserve
