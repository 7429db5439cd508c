// HttpRouter: the HTTP API without the sockets. Maps one complete request to a reply, or to a
// GenerationJob whose output the connection streams:
//
//   POST /v1/completions, POST /v1/chat/completions   OpenAI API (job)
//   POST /v1/responses, GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items
//                                                     the Responses API (responses_api.h)
//   DELETE /v1/sessions/{id}                          ends one of the caller's chat sessions
//   GET  /v1/models, GET /v1/models/{id}              the served model
//   GET  /health                                      liveness: 200 while the process runs
//   GET  /ready                                       200 only when ctx.Ready(); else 503
//   GET  /metrics                                     Prometheus text (SerializeMetrics)
//   POST /tokenize, POST /detokenize                  {"tokens","count"} / {"prompt"}
//   GET  /debug/cache                                 only with --enable-debug-endpoints: runs the
//                                                     KV cache integrity check on the engine thread
//   GET  /v1/cache/blocks                             the KV block pool, taken on the engine thread
//                                                     (console.h has the JSON)
//   GET  /                                            the web console page (open: it asks for the
//                                                     key itself); 404 with --no-console
//
// Order of checks: unknown path 404, API key 401 (/health, /ready, /metrics are open unless
// protect_observability), wrong method 405, loading or draining 503 (everything except the
// three observability routes; for generation the RequestBuilder decides), then the route.
// Errors are OpenAI error bodies with the status from server/error_mapping.
//
// Generation requests go through the RequestBuilder that gRPC uses too (model, sessions,
// tokenization, tenant isolation, limits, rejection accounting); the router only decodes
// the OpenAI JSON and counts the requests that fail to decode as rejected.
//
// Handle may parse and tokenize large bodies or wait about one engine step for the engine
// thread: the HTTP server calls it for those requests (IsHeavy) on its worker threads, never
// on the I/O threads.
//
// Thread-safe: Handle is called concurrently from the I/O threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/api/auth.h"
#include "server/http/http_generation.h"
#include "server/http/http_types.h"
#include "server/http/openai_codec.h"
#include "server/http/responses_api.h"
#include "server/api/request_builder.h"
#include "server/api/server_context.h"

namespace kvserve {

class HttpRouter {
 public:
  explicit HttpRouter(ServerContext* ctx);

  struct Result {
    std::string route;                   // route name for logs ("/v1/completions", "unknown")
    std::string id;                      // response id for generation requests
    std::optional<HttpReply> reply;      // a complete reply ...
    std::unique_ptr<GenerationJob> job;  // ... or a generation to stream or wait for
    bool quiet = false;                  // observability routes: logged at debug level
  };
  [[nodiscard]] Result Handle(const HttpRequestInfo& request);

  // Whether the request may take long to handle (parsing, tokenizing a large body): POST.
  // POST requests, and the routes that wait for the engine thread.
  static bool IsHeavy(const HttpRequestInfo& request);

 private:
  Result Generate(const HttpRequestInfo& request, ApiKind kind, const std::string& tenant);
  HttpReply Tokenize(const HttpRequestInfo& request);
  // POST /apply-template (llama.cpp's): a chat request in, {"prompt": the rendered text} out.
  HttpReply ApplyTemplate(const HttpRequestInfo& request);
  // /v1/cache/pins (GET lists, POST pins) and /v1/cache/pins/{id} (DELETE); http_pins.cpp.
  HttpReply Pins(const HttpRequestInfo& request, std::string_view pin_id, const std::string& tenant);
  // /v1/responses and /v1/responses/{id}[/input_items] (`rest`: what follows the prefix);
  // http_responses.cpp.
  Result Responses(const HttpRequestInfo& request, std::string_view rest, const std::string& tenant);
  // `prefix` and 128 random bits in hex (as OpenAI's ids: nothing to enumerate, nothing said of
  // how many requests came before).
  static std::string RandomId(std::string_view prefix);

  ServerContext* ctx_;
  ApiKeyAuth auth_;
  RequestBuilder builder_;
  const int64_t created_;  // unix seconds at start, for /v1/models and responses
  const uint64_t label_key_;  // keys the labels of other tenants' cache owners (console.h)
  std::shared_ptr<ResponseStore> responses_;  // stored responses (shared with their jobs)
};

// One log line per finished HTTP request: id, method, route, status, client, duration; for
// generation requests also prompt/completion/cached tokens and time to first token.
struct RequestRecord {
  std::string id;
  std::string method;
  std::string route;
  std::string remote;
  int status = 0;
  double duration_s = 0;
  bool quiet = false;
  const GenerationJob* job = nullptr;  // usage comes from here when set
  bool client_gone = false;            // the client disconnected or stopped reading
};
void LogRequest(const RequestRecord& record);

}  // namespace kvserve
