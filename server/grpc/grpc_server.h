// GrpcServer: the entry point of the gRPC front end that `kvserve serve` starts. It runs on
// its own threads and talks to the engine only through ServerContext::engine.
#pragma once

#include <memory>

#include "common/status.h"
#include "server/api/server_context.h"

namespace kvserve {

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

}  // namespace kvserve
