// Entry points of the front ends that `kvserve serve` starts. Each runs on its own threads
// and talks to the engine only through ServerContext::engine.
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

// gRPC server: kvserve.v1.Generation, grpc.health.v1.Health, server reflection.
class GrpcServer {
 public:
  virtual ~GrpcServer() = default;
  // Binds ctx.options.host:grpc_port (0 picks a free port).
  [[nodiscard]] static StatusOr<std::unique_ptr<GrpcServer>> Start(ServerContext* ctx);
  virtual int port() const = 0;
  // Marks health NOT_SERVING, refuses new calls, waits up to `grace_seconds` for calls.
  virtual void Shutdown(double grace_seconds) = 0;
};

// Registers kvserve's metrics (fed from Engine::GetStats at scrape time) in ctx.registry.
void RegisterMetrics(ServerContext* ctx);
// Text exposition of ctx.registry (the body of GET /metrics).
std::string SerializeMetrics(const ServerContext& ctx);

}  // namespace kvserve
