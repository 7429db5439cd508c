// HttpServer: the entry point of the HTTP front end that `kvserve serve` starts. It runs on
// its own threads and talks to the engine only through ServerContext::engine.
#pragma once

#include <memory>

#include "common/status.h"
#include "server/api/server_context.h"

namespace kvserve {

// Boost.Beast HTTP/1.1 server: OpenAI API, /health, /ready, /metrics, /tokenize,
// /detokenize. Asynchronous; keep-alive; no thread per connection.
class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // Binds ctx.options.host:http_port (0 picks a free port) and starts serving.
  [[nodiscard]] static StatusOr<std::unique_ptr<HttpServer>> Start(ServerContext* ctx);
  virtual int port() const = 0;
  // Stops accepting and closes idle connections; streams in progress end when their
  // requests do (the engine drains them).
  virtual void Stop() = 0;
};

}  // namespace kvserve
