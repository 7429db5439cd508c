// HttpRouter::Pins: pinned prefixes over HTTP (an extension of the OpenAI API):
//
//   POST   /v1/cache/pins       {"prompt": text | [ids]} or {"messages": [...]}, optional
//                                "model", "cache_salt", "priority" -> 200 the pin
//   GET    /v1/cache/pins       -> {"object": "list", "data": [pins], "pinned_bytes",
//                                   "max_pinned_bytes"}
//   DELETE /v1/cache/pins/{id}  -> {"id", "object": "cache.pin", "deleted": true}; 404 unknown
//
// A pin: {"id", "object": "cache.pin", "created", "prompt_tokens", "pinned_tokens", "bytes"}.
// The body is read as a completions (prompt) or chat (messages) request; sampling fields are
// ignored. Pins belong to the caller's API key. A client that goes away while its prompt is
// prefilled does not cancel the pin: it appears in GET and can be deleted.
#include <nlohmann/json.hpp>

#include "server/http/http_router.h"
#include "server/http/openai_codec.h"
#include "server/http/openai_format.h"

namespace kvserve {
namespace {

// Long prompts take a while to prefill on a busy server.
constexpr double kPinTimeoutSeconds = 600;
constexpr double kListTimeoutSeconds = 10;

nlohmann::json PinJson(const PinnedPrefix& p) {
  return {{"id", p.id},
          {"object", "cache.pin"},
          {"created", p.created},
          {"prompt_tokens", p.prompt_tokens},
          {"pinned_tokens", p.pinned_tokens},
          {"bytes", p.bytes}};
}

HttpReply PinJsonReply(const nlohmann::json& body) {
  HttpReply reply;
  reply.body = body.dump();
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

HttpReply StatusError(Status status, std::string param = "") {
  return ErrorReply(ApiError{std::move(status), std::move(param), "", 0});
}

}  // namespace

HttpReply HttpRouter::Pins(const HttpRequestInfo& request, std::string_view pin_id, const std::string& tenant) {
  Engine& engine = *ctx_->engine;
  if (request.method == "DELETE") {
    const Status unpinned = engine.Unpin(tenant, std::string(pin_id), kListTimeoutSeconds);
    if (!unpinned.ok()) return StatusError(unpinned);
    return PinJsonReply({{"id", pin_id}, {"object", "cache.pin"}, {"deleted", true}});
  }
  if (request.method == "GET") {
    StatusOr<PinList> list = engine.ListPins(tenant, kListTimeoutSeconds);
    if (!list.ok()) return StatusError(list.status());
    nlohmann::json data = nlohmann::json::array();
    for (const PinnedPrefix& p : list->pins) data.push_back(PinJson(p));
    return PinJsonReply({{"object", "list"},
                      {"data", std::move(data)},
                      {"pinned_bytes", list->pinned_bytes},
                      {"max_pinned_bytes", list->max_pinned_bytes}});
  }
  // POST: a chat body when it has "messages", else a completions body.
  const nlohmann::json probe = nlohmann::json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  const ApiKind kind = probe.is_object() && probe.contains("messages") ? ApiKind::kChat : ApiKind::kCompletion;
  OpenAiRequest q;
  ApiError error;
  if (!ParseOpenAiRequest(request.body, kind, &q, &error)) return ErrorReply(error);
  GenerationRequest pin_request;
  if (!builder_.BuildPin(q, Caller{tenant, request.session_id}, &pin_request, &error)) return ErrorReply(error);
  StatusOr<PinnedPrefix> pin = engine.PinPrefix(std::move(pin_request), kPinTimeoutSeconds);
  if (!pin.ok()) return StatusError(pin.status(), pin.status().code() == StatusCode::kInvalidArgument ? "prompt" : "");
  return PinJsonReply(PinJson(*pin));
}

}  // namespace kvserve
