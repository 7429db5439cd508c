// ServerContext: what every front end (HTTP, gRPC, metrics) shares: the engine, the model's
// identity, the server options and readiness state. Built once by
// `kvserve serve` (cli/cli_serve.cpp); the front ends only read it, except the atomics.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/profiler.h"
#include "engine/engine.h"
#include "server/api/tls.h"
#include "server/events/kv_event_publisher.h"

namespace kvserve {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int http_port = 8080;
  int grpc_port = 50051;               // 0: pick a free port; -1: gRPC off
  int http_threads = 2;                // I/O threads of the HTTP server
  // Requests that may wait for a grammar compile at once (the engine's compile threads and
  // queue): the HTTP handler threads get as many more, so other requests never wait behind them.
  int grammar_compile_slots = 0;
  // --chat-template: a Jinja chat template that replaces the model's ("": the model's own).
  std::string chat_template;
  // --reasoning-format: "auto" (a reply's <think> part is returned apart) or "none" (as content).
  std::string reasoning_format = "auto";
  std::vector<std::string> api_keys;   // empty: no auth
  bool protect_observability = false;  // also require the key for /health, /ready, /metrics
  size_t max_body_bytes = 8 << 20;     // larger request bodies: 413
  size_t max_header_bytes = 16 << 10;  // larger headers: 431
  double header_timeout_seconds = 10;  // a client that trickles its request is cut off
  double idle_timeout_seconds = 120;   // keep-alive connections idle this long are closed
  double write_timeout_seconds = 30;   // a client that stops reading its stream is aborted
  double shutdown_grace_seconds = 30;  // SIGTERM: in-flight requests get this long
  int default_max_tokens = 16;         // /v1/completions default (OpenAI's)
  std::string served_model_name;       // id in /v1/models; default: the file's name
  bool enable_debug_endpoints = false; // GET /debug/cache (KV cache integrity check)
  bool enable_console = true;          // GET / (the web console page)
  // Whether a request's `priority` is honoured. Off (the default), any key could jump every
  // other tenant's queue with it, so a non-zero priority is refused (400, as vLLM does
  // without priority scheduling); the operator turns it on with --allow-client-priority.
  bool allow_client_priority = false;
  TlsFiles tls;                        // set: HTTPS and gRPC over TLS (server/api/tls.h)
  // Stored responses (the Responses API): bytes in all, and per API key (a key past its quota
  // loses its own oldest responses, never another key's).
  int64_t responses_max_bytes = int64_t{256} << 20;
  int64_t responses_max_bytes_per_key = int64_t{64} << 20;
};

struct ServerContext {
  Engine* engine = nullptr;
  std::string model_id;       // the id clients must use in "model"
  std::string backend_name;   // "cpu" | "cuda"
  ServerOptions options;
  TlsMaterial tls;            // loaded from options.tls before the front ends start
  // --profile: the HTTP server adds the time it spends turning engine output into SSE bytes
  // and writing them (ProfileOp::kNetworkWrite). Nullable, not owned; set before the front
  // ends start and outlives them.
  Profiler* profiler = nullptr;
  // --state-dir (null: none): stored responses here, chat sessions' caches in the engine's.
  std::shared_ptr<StateDir> state;
  // --kv-events-endpoint (null: none): the publisher's counters, for /metrics. Not owned; set
  // before the front ends start and outlives them.
  const KvEventCounters* kv_events = nullptr;
  std::atomic<bool> loading{true};    // /ready is 503 until the model is loaded
  std::atomic<bool> draining{false};  // /ready is 503 and new requests are refused
  // Generation requests refused before the engine accepted them: the wire format did not
  // decode (counted by the front end), or the RequestBuilder refused it (unknown model,
  // unrenderable messages, loading, draining) or Engine::Submit did (queue full, prompt too
  // long) — counted by the builder. Once per refused request, never for auth failures; the
  // metrics module exports it as kvserve_requests_total{status="rejected"}.
  std::atomic<int64_t> requests_rejected{0};
  // Responses asked to be stored ("store": true) that were not (a full or failing --state-dir,
  // over the byte bounds, deleted while they streamed): answered with "store": false.
  std::atomic<int64_t> responses_not_stored{0};

  void CountRejected() { requests_rejected.fetch_add(1, std::memory_order_relaxed); }

  // /ready and gRPC health: a generation request would be admitted now (model loaded, not
  // draining, engine healthy and its queue not full).
  bool Ready() const { return !loading && !draining && engine != nullptr && engine->AcceptingRequests(); }
};

}  // namespace kvserve
