// One HTTP/1.1 connection of HttpServer (plain TCP or TLS), and what all connections share.
// http_connection.cpp describes a connection's life; http_server.cpp accepts and stops them.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "server/api/server_context.h"
#include "server/http/http_router.h"

namespace kvserve::http_internal {

// What Stop() needs of a connection, whatever its transport.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Server stop: close now when between requests, else after the current response.
  virtual void OnServerStop() = 0;
  virtual boost::asio::any_io_executor executor() = 0;
};

// What every connection shares: the context, the router, the worker pool (owned by the
// server, which outlives the connections' use of it) and the registry Stop() walks.
struct ServerShared {
  ServerShared(ServerContext* c, boost::asio::thread_pool* w) : ctx(c), router(c), workers(w) {}
  ServerContext* ctx;
  HttpRouter router;
  boost::asio::thread_pool* workers;
  std::atomic<int> pending_work{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> connections;
};

// Serves a freshly accepted socket (registered in shared->connections until it closes). With
// `tls` (not owned; outlives the connection) the connection is HTTPS: a client that speaks
// plain HTTP gets a 400 naming the scheme, one whose handshake fails is closed.
void StartConnection(boost::asio::ip::tcp::socket socket, const std::shared_ptr<ServerShared>& shared,
                     boost::asio::ssl::context* tls);

}  // namespace kvserve::http_internal
