// HttpRouter: route table, auth, readiness gates, OpenAI request -> engine submissions.
#include "server/http/http_router.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <random>

#include <openssl/rand.h>

#include "common/log.h"
#include "common/sha256.h"
#include "server/api/metrics.h"
#include "server/http/console.h"

namespace kvserve {
namespace {

enum class Route {
  kCompletions, kChat, kModels, kModel, kHealth, kReady, kMetrics, kTokenize, kApplyTemplate, kDetokenize, kDebugCache,
  kConsole, kCacheBlocks, kPins, kPin, kSession, kResponses, kResponse
};

// Who may call a route without a key.
enum class Access {
  kKey,            // the API key when keys are configured
  kObservability,  // open unless protect_observability; also served while loading or draining
  kOpen,           // always open: the console page, which holds no data and asks for the key
};

struct RouteSpec {
  Route route;
  std::string_view methods;  // allowed, ", "-separated
  Access access = Access::kKey;
  bool waits_for_engine = false;  // blocks about one engine step: handled on a worker thread
};

constexpr char kModelsPrefix[] = "/v1/models/";
constexpr std::string_view kPinsPath = "/v1/cache/pins";
constexpr std::string_view kSessionsPath = "/v1/sessions";
constexpr std::string_view kResponsesPath = "/v1/responses";

std::optional<RouteSpec> FindRoute(std::string_view path) {
  if (path == "/v1/completions") return RouteSpec{Route::kCompletions, "POST"};
  if (path == "/v1/chat/completions") return RouteSpec{Route::kChat, "POST"};
  if (path == "/v1/models") return RouteSpec{Route::kModels, "GET"};
  if (path == kResponsesPath) return RouteSpec{Route::kResponses, "POST"};
  if (path.starts_with(kResponsesPath) && path.size() > kResponsesPath.size() + 1 &&
      path[kResponsesPath.size()] == '/') {
    // On a worker thread: a stored response may be read from the state directory, and
    // DELETE ends its chain's chat session on the engine thread.
    return RouteSpec{Route::kResponse, path.ends_with("/input_items") ? "GET" : "GET, DELETE", Access::kKey,
                     /*waits_for_engine=*/true};
  }
  if (path.starts_with(kModelsPrefix) && path.size() > sizeof(kModelsPrefix) - 1) {
    return RouteSpec{Route::kModel, "GET"};
  }
  if (path == "/health") return RouteSpec{Route::kHealth, "GET", Access::kObservability};
  if (path == "/ready") return RouteSpec{Route::kReady, "GET", Access::kObservability};
  if (path == "/metrics") return RouteSpec{Route::kMetrics, "GET", Access::kObservability};
  if (path == "/tokenize") return RouteSpec{Route::kTokenize, "POST"};
  if (path == "/apply-template") return RouteSpec{Route::kApplyTemplate, "POST"};
  if (path == "/detokenize") return RouteSpec{Route::kDetokenize, "POST"};
  if (path == "/debug/cache") return RouteSpec{Route::kDebugCache, "GET", Access::kKey, /*waits_for_engine=*/true};
  if (path == "/v1/cache/blocks") {
    return RouteSpec{Route::kCacheBlocks, "GET", Access::kKey, /*waits_for_engine=*/true};
  }
  if (path == kPinsPath) return RouteSpec{Route::kPins, "GET, POST", Access::kKey, /*waits_for_engine=*/true};
  if (path.starts_with(kPinsPath) && path.size() > kPinsPath.size() + 1 && path[kPinsPath.size()] == '/') {
    return RouteSpec{Route::kPin, "DELETE", Access::kKey, /*waits_for_engine=*/true};
  }
  if (path.starts_with(kSessionsPath) && path.size() > kSessionsPath.size() + 1 && path[kSessionsPath.size()] == '/') {
    return RouteSpec{Route::kSession, "DELETE", Access::kKey, /*waits_for_engine=*/true};
  }
  if (path == "/") return RouteSpec{Route::kConsole, "GET", Access::kOpen};
  return std::nullopt;
}

bool MethodAllowed(std::string_view methods, std::string_view method) {
  for (size_t start = 0; start < methods.size();) {
    const size_t end = std::min(methods.find(", ", start), methods.size());
    if (methods.substr(start, end - start) == method) return true;
    start = end + 2;
  }
  return false;
}

// The path of a request target ("/v1/models?x=1" -> "/v1/models").
std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

// A path segment with its %XX escapes decoded (RFC 3986: clients escape a space, '?', '#', '%',
// '/' and every non-ASCII byte of an id); nullopt when an escape is malformed.
std::optional<std::string> PercentDecoded(std::string_view s) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

HttpReply Error(Status status, std::string code = "", std::string param = "") {
  return ErrorReply(ApiError{std::move(status), std::move(param), std::move(code), 0});
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool HttpRouter::IsHeavy(const HttpRequestInfo& request) {
  if (request.method == "POST") return true;
  const std::optional<RouteSpec> spec = FindRoute(PathOf(request.target));
  return spec && spec->waits_for_engine;
}

HttpRouter::HttpRouter(ServerContext* ctx)
    : ctx_(ctx), auth_(ctx->options.api_keys), builder_(ctx), created_(UnixNow()),
      label_key_((static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}()),
      responses_(std::make_shared<ResponseStore>(
          ResponseStoreLimits{ctx->options.responses_max_bytes, ctx->options.responses_max_bytes_per_key,
                              &ctx->responses_not_stored},
          ctx->state.get())) {}

std::string HttpRouter::RandomId(std::string_view prefix) {
  std::array<unsigned char, 16> bits;
  if (RAND_bytes(bits.data(), static_cast<int>(bits.size())) != 1) {
    thread_local std::mt19937_64 fallback(std::random_device{}());  // only if OpenSSL's pool fails
    for (unsigned char& b : bits) b = static_cast<unsigned char>(fallback());
  }
  return std::string(prefix) + ToHex(std::string_view(reinterpret_cast<const char*>(bits.data()), bits.size()));
}

HttpRouter::Result HttpRouter::Handle(const HttpRequestInfo& request) {
  Result result;
  const std::string_view path = PathOf(request.target);
  std::optional<RouteSpec> spec = FindRoute(path);
  if (spec && spec->route == Route::kDebugCache && !ctx_->options.enable_debug_endpoints) spec.reset();
  if (spec && spec->route == Route::kConsole && !ctx_->options.enable_console) spec.reset();
  if (!spec) {
    result.route = "unknown";
    result.reply = Error(NotFoundError(fmt::format("unknown route: {} {}", request.method, path)), "unknown_url");
    return result;
  }
  result.route = spec->route == Route::kModel ? std::string("/v1/models/{id}")
                 : spec->route == Route::kPin ? std::string(kPinsPath) + "/{id}"
                 : spec->route == Route::kSession ? std::string(kSessionsPath) + "/{id}"
                 : spec->route == Route::kResponse
                     ? std::string(kResponsesPath) + (path.ends_with("/input_items") ? "/{id}/input_items" : "/{id}")
                                              : std::string(path);
  const bool observability = spec->access == Access::kObservability;
  result.quiet = observability;

  std::optional<std::string> tenant = auth_.Authenticate(request.authorization);
  const bool open = spec->access == Access::kOpen || (observability && !ctx_->options.protect_observability);
  if (!tenant && !open) {
    HttpReply reply = Error(UnauthenticatedError(request.authorization.empty()
                                                     ? "missing API key: send 'Authorization: Bearer <key>'"
                                                     : "invalid API key"),
                            "invalid_api_key");
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
    result.reply = std::move(reply);
    return result;
  }
  if (!MethodAllowed(spec->methods, request.method)) {
    HttpReply reply = Error(InvalidArgumentError(fmt::format("method {} is not allowed for {} (use {})",
                                                             request.method, path, spec->methods)),
                            "method_not_allowed");
    reply.status = 405;
    reply.headers.emplace_back("Allow", std::string(spec->methods));
    result.reply = std::move(reply);
    return result;
  }
  if (spec->route == Route::kCompletions || spec->route == Route::kChat) {
    return Generate(request, spec->route == Route::kChat ? ApiKind::kChat : ApiKind::kCompletion,
                    tenant.value_or(""));
  }
  if (spec->route == Route::kResponses || spec->route == Route::kResponse) {
    Result r = Responses(request, path.substr(kResponsesPath.size()), tenant.value_or(""));
    r.route = result.route;
    return r;
  }
  if (!observability && (ctx_->loading || ctx_->draining)) {
    result.reply = Error(UnavailableError(ctx_->loading ? "the model is loading; retry shortly"
                                                        : "the server is shutting down"),
                         "service_unavailable");
    return result;
  }

  switch (spec->route) {
    case Route::kCompletions:
    case Route::kChat:
    case Route::kResponses:
    case Route::kResponse:
      break;  // handled above
    case Route::kModels:
      result.reply = ModelsReply(ctx_->model_id, created_, builder_.max_model_len());
      return result;
    case Route::kModel: {
      const std::string_view id = path.substr(sizeof(kModelsPrefix) - 1);
      if (id != ctx_->model_id) {
        result.reply = Error(NotFoundError(fmt::format("the model '{}' does not exist", id)), "model_not_found", "model");
      } else {
        result.reply = ModelReply(ctx_->model_id, created_, builder_.max_model_len());
      }
      return result;
    }
    case Route::kHealth:
      result.reply = StatusReply(200, "ok");
      return result;
    case Route::kReady: {
      if (ctx_->Ready()) {
        result.reply = StatusReply(200, "ready");
      } else {
        const char* state = ctx_->loading                  ? "loading"
                            : ctx_->draining               ? "draining"
                            : !ctx_->engine->Healthy()     ? "unhealthy"
                                                           : "busy";  // the queue is full
        result.reply = StatusReply(503, state);
        result.reply->headers.emplace_back("Retry-After", "1");
      }
      return result;
    }
    case Route::kMetrics: {
      HttpReply reply;
      if (ctx_->loading) {
        reply.status = 503;
        reply.content_type = "text/plain; charset=utf-8";
        reply.body = "model loading\n";
      } else {
        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
        reply.body = SerializeMetrics(*ctx_);
      }
      result.reply = std::move(reply);
      return result;
    }
    case Route::kTokenize:
      result.reply = Tokenize(request);
      return result;
    case Route::kApplyTemplate:
      result.reply = ApplyTemplate(request);
      return result;
    case Route::kDebugCache: {
      // Debug only (--enable-debug-endpoints): the check runs on the engine thread.
      KvCacheStats stats;
      const Status integrity = ctx_->engine->VerifyCacheIntegrity(/*timeout_seconds=*/10, &stats);
      if (integrity.code() == StatusCode::kUnavailable) {
        result.reply = Error(integrity, "service_unavailable");
      } else {
        result.reply = DebugCacheReply(integrity, stats);
      }
      return result;
    }
    case Route::kConsole:
      result.reply = ConsoleReply();
      return result;
    case Route::kCacheBlocks: {
      // Taken on the engine thread between two steps (a worker thread waits: waits_for_engine).
      StatusOr<CacheSnapshot> snapshot = ctx_->engine->SnapshotCache(/*timeout_seconds=*/10);
      if (!snapshot.ok()) {
        result.reply = Error(snapshot.status(), "service_unavailable");
        return result;
      }
      HttpReply reply;
      reply.body = CacheBlocksJson(*snapshot, tenant.value_or(""), auth_.enabled(), label_key_);
      reply.headers.emplace_back("Cache-Control", "no-store");
      result.reply = std::move(reply);
      return result;
    }
    case Route::kPins:
    case Route::kPin:
      result.reply = Pins(request, path.substr(std::min(path.size(), kPinsPath.size() + 1)), tenant.value_or(""));
      return result;
    case Route::kSession: {
      // DELETE /v1/sessions/{id}: ends the caller's chat session (its request, if one runs,
      // is aborted) and frees its blocks; 404 when the caller has no such session.
      const std::optional<std::string> decoded = PercentDecoded(path.substr(kSessionsPath.size() + 1));
      if (!decoded) {
        result.reply = Error(InvalidArgumentError("the session id in the path has a malformed %-escape"));
        return result;
      }
      const std::string& id = *decoded;
      const Status ended = ctx_->engine->EndSession(tenant.value_or(""), id, /*timeout_seconds=*/10);
      if (!ended.ok()) {
        result.reply = Error(ended, ended.code() == StatusCode::kNotFound ? "session_not_found" : "");
        return result;
      }
      HttpReply reply;
      reply.body = nlohmann::json{{"id", id}, {"object", "session"}, {"deleted", true}}.dump();
      reply.headers.emplace_back("Cache-Control", "no-store");
      result.reply = std::move(reply);
      return result;
    }
    case Route::kDetokenize: {
      std::vector<int32_t> tokens;
      ApiError error;
      if (!ParseDetokenizeRequest(request.body, &tokens, &error)) {
        result.reply = ErrorReply(error);
        return result;
      }
      const Tokenizer& tok = ctx_->engine->model().tokenizer();
      for (int32_t id : tokens) {
        if (id < 0 || id >= tok.vocab_size()) {
          result.reply = Error(InvalidArgumentError(fmt::format("token id {} is outside the vocabulary [0, {})",
                                                                id, tok.vocab_size())), "", "tokens");
          return result;
        }
      }
      result.reply = DetokenizeReply(tok.Decode(tokens));
      return result;
    }
  }
  return result;
}

HttpReply HttpRouter::Tokenize(const HttpRequestInfo& request) {
  TokenizeRequest t;
  ApiError error;
  if (!ParseTokenizeRequest(request.body, &t, &error)) return ErrorReply(error);
  if (Status model = builder_.CheckModel(t.model); !model.ok()) return Error(model, "model_not_found", "model");
  if (t.messages.empty()) {
    return TokenizeReply(ctx_->engine->model().tokenizer().Encode(t.text, t.add_special_tokens),
                         builder_.max_model_len());
  }
  StatusOr<RenderedPrompt> rendered = builder_.RenderChat(t.messages, t.add_generation_prompt, {}, t.chat_extras);
  if (!rendered.ok()) return ErrorReply(ApiError{rendered.status(), "messages", "", 0});
  return TokenizeReply(rendered->tokens, builder_.max_model_len());
}

HttpReply HttpRouter::ApplyTemplate(const HttpRequestInfo& request) {
  OpenAiRequest q;
  ApiError error;
  if (!ParseOpenAiRequest(request.body, ApiKind::kChat, &q, &error)) return ErrorReply(error);
  if (Status model = builder_.CheckModel(q.model); !model.ok()) return Error(model, "model_not_found", "model");
  std::vector<ChatTool> tools;
  for (const ToolDefinition& t : q.tools.tools) tools.push_back(t.chat);
  StatusOr<RenderedPrompt> rendered = builder_.RenderChat(q.messages, q.add_generation_prompt, tools, q.chat_extras);
  if (!rendered.ok()) return ErrorReply(ApiError{rendered.status(), "messages", "", 0});
  return DetokenizeReply(rendered->text);  // {"prompt": text}, as llama.cpp answers
}

HttpRouter::Result HttpRouter::Generate(const HttpRequestInfo& request, ApiKind kind, const std::string& tenant) {
  Result result;
  result.route = kind == ApiKind::kChat ? "/v1/chat/completions" : "/v1/completions";
  OpenAiRequest q;
  ApiError error;
  if (!ParseOpenAiRequest(request.body, kind, &q, &error)) {
    ctx_->CountRejected();  // the builder counts every refusal after decoding
    result.reply = ErrorReply(error);
    return result;
  }
  SubmittedRequests submitted;
  if (!builder_.Submit(q, Caller{tenant, request.session_id}, &submitted, &error)) {
    result.reply = ErrorReply(error);
    return result;
  }
  Engine& engine = *ctx_->engine;
  ResponseMeta meta;
  meta.kind = kind;
  meta.id = RandomId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  meta.created = UnixNow();
  meta.model = ctx_->model_id;
  meta.logprobs = q.logprobs;
  meta.include_usage = q.stream && q.include_usage;
  if (q.tools.active()) {
    meta.tools = builder_.chat_template().tool_syntax();
    meta.tool_definitions = q.tools.tools;
  }
  meta.reasoning = submitted.reasoning;
  meta.reasoning_open = submitted.reasoning_open;
  result.id = meta.id;
  result.job = std::make_unique<GenerationJob>(&engine, &engine.model().tokenizer(), std::move(meta), q.stream, q.n,
                                               std::move(submitted.streams), std::move(submitted.echo),
                                               std::move(submitted.prompt_lengths));
  return result;
}

void LogRequest(const RequestRecord& r) {
  const spdlog::level::level_enum level = r.quiet ? spdlog::level::debug : spdlog::level::info;
  const double ms = r.duration_s * 1e3;
  if (r.job == nullptr) {
    LogEvent(level, "request", {{"id", r.id}, {"method", r.method}, {"route", r.route}, {"status", r.status},
                                {"client", r.remote}, {"duration_ms", ms}});
    return;
  }
  const RequestUsage u = r.job->usage();
  LogEvent(level, "request",
           {{"id", r.id}, {"method", r.method}, {"route", r.route}, {"status", r.status}, {"client", r.remote},
            {"prompt_tokens", u.prompt_tokens}, {"cached_tokens", u.cached_prompt_tokens},
            {"completion_tokens", u.completion_tokens}, {"ttft_ms", u.time_to_first_token_s * 1e3},
            {"duration_ms", ms}, {"client_gone", r.client_gone ? "yes" : "no"}});
}

}  // namespace kvserve
