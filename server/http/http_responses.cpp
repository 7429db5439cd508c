// HttpRouter::Responses: the Responses API's routes (see responses_api.h). A new response is
// a chat completion of the stored conversation plus its input, under the chain's chat session;
// its GenerationJob formats the Responses objects and events and stores the response.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>

#include "server/http/http_router.h"
#include "server/http/openai_format.h"

namespace kvserve {
namespace {

HttpReply JsonReply(std::string body) {
  HttpReply reply;
  reply.body = std::move(body);
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

HttpReply NotFound(std::string_view id) {
  return ErrorReply(ApiError{NotFoundError(fmt::format("No response found with id '{}'.", id)), "", "", 0});
}

}  // namespace

HttpRouter::Result HttpRouter::Responses(const HttpRequestInfo& request, std::string_view rest,
                                         const std::string& tenant) {
  Result result;
  if (!rest.empty()) {
    // "/{id}" or "/{id}/input_items".
    const bool items = rest.ends_with("/input_items");
    const std::string id(rest.substr(1, rest.size() - 1 - (items ? sizeof("/input_items") - 1 : 0)));
    if (request.method == "DELETE") {
      const std::optional<std::string> session = responses_->Delete(tenant, id);
      if (!session) {
        result.reply = NotFound(id);
        return result;
      }
      // The conversation's KV cache goes with it (memory and disk); a response of the chain
      // still generating is cancelled.
      if (!session->empty()) (void)ctx_->engine->EndSession(tenant, *session, /*timeout_seconds=*/10);
      result.reply = JsonReply(nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
      return result;
    }
    const std::optional<StoredResponse> stored = responses_->Get(tenant, id);
    if (!stored) {
      result.reply = NotFound(id);
    } else if (items) {
      result.reply = JsonReply(InputItemsJson(*stored, request.target.find("order=asc") != std::string::npos));
    } else {
      result.reply = JsonReply(stored->object);
    }
    return result;
  }

  ResponsesRequest rq;
  ApiError error;
  if (!ParseResponsesRequest(request.body, &rq, &error)) {
    ctx_->CountRejected();
    result.reply = ErrorReply(error);
    return result;
  }
  OpenAiRequest& q = rq.generation;
  ResponsesTurnInfo info;
  info.id = RandomId("resp_");
  info.model = ctx_->model_id;
  info.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  info.instructions = rq.instructions;
  info.previous_response_id = rq.previous_response_id;
  info.store = rq.store;
  info.max_output_tokens = q.max_tokens;
  info.temperature = q.sampling.temperature;
  info.top_p = q.sampling.top_p;
  info.user = q.user;
  info.tenant = tenant;
  info.input = q.messages;
  std::vector<ChatMessage> conversation;  // without instructions; this request's input last
  if (!rq.previous_response_id.empty()) {
    std::optional<StoredResponse> previous = responses_->Get(tenant, rq.previous_response_id);
    std::optional<std::vector<ChatMessage>> before =
        previous ? responses_->Conversation(tenant, rq.previous_response_id) : std::nullopt;
    if (!before) {
      ctx_->CountRejected();
      result.reply = ErrorReply(ApiError{
          NotFoundError(fmt::format("Previous response with id '{}' not found.", rq.previous_response_id)),
          "previous_response_id", "previous_response_not_found", 0});
      return result;
    }
    conversation = std::move(*before);
    info.session_id = previous->session_id;
  }
  conversation.insert(conversation.end(), q.messages.begin(), q.messages.end());
  // A stored conversation keeps its KV cache in a chat session of its own, which every
  // response of the chain continues.
  if (rq.store && info.session_id.empty()) info.session_id = "responses:" + info.id;
  q.messages.clear();
  if (rq.instructions) q.messages.push_back({"system", *rq.instructions});
  q.messages.insert(q.messages.end(), conversation.begin(), conversation.end());
  q.session_id = rq.store ? info.session_id : "";
  q.session_if_free = true;  // two continuations of one response at once: the second forks

  SubmittedRequests submitted;
  if (!builder_.Submit(q, Caller{tenant, ""}, &submitted, &error)) {
    result.reply = ErrorReply(error);
    return result;
  }
  ResponseMeta meta;
  meta.kind = ApiKind::kChat;
  meta.id = info.id;
  meta.created = info.created_at;
  meta.model = ctx_->model_id;
  meta.responses = std::make_shared<ResponsesTurn>(std::move(info), responses_, submitted.reasoning,
                                                  submitted.reasoning_open);
  result.id = meta.id;
  Engine& engine = *ctx_->engine;
  result.job = std::make_unique<GenerationJob>(&engine, &engine.model().tokenizer(), std::move(meta), q.stream, 1,
                                               std::move(submitted.streams), std::move(submitted.echo),
                                               std::move(submitted.prompt_lengths));
  return result;
}

}  // namespace kvserve
