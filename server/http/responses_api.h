// The Responses API (OpenAI's POST /v1/responses), on kvserve's chat sessions:
//
//   POST   /v1/responses                    {"input": string | [message items], "instructions",
//                                           "previous_response_id", "store" (default true),
//                                           "max_output_tokens", "temperature", "top_p",
//                                           "stream", "model", "user", "metadata"}
//   GET    /v1/responses/{id}               the stored response object
//   DELETE /v1/responses/{id}               {"id", "object": "response", "deleted": true}
//   GET    /v1/responses/{id}/input_items   {"object": "list", "data": [message items], ...}
//
// Conversation state: a stored response keeps its own input and output and the id it continued
// (response_store.h: deltas, bounded in bytes per API key). A request with
// previous_response_id continues the chain: the conversation is rendered with the chat
// template as a chat completion would be, under the chain's chat session, so only the new
// input is prefilled (the session matches the re-rendered history
// against its cache: engine/history_match.h). `instructions` apply to the one response (as
// OpenAI's do; a system message in front), and are not carried to the next. Responses belong
// to the caller's API key: another key's id is 404, as an unknown one.
//
// Stream events (SSE "event: <type>" + "data: <json>"): response.created,
// response.in_progress, response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done, response.content_part.done,
// response.output_item.done, then response.completed (or response.incomplete when
// max_output_tokens cut it), each with a sequence_number; an error after the start is an
// "error" event. Usage: {"input_tokens", "input_tokens_details": {"cached_tokens"},
// "output_tokens", "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens"}.
//
// Reasoning (a template that writes <think> tags, server/api/reasoning.h): the output starts
// with a "reasoning" item ({"type": "reasoning", "summary": [], "content": [{"type":
// "reasoning_text", "text"}]}) before the message; streamed, its text comes as
// response.reasoning_text.delta events and the message item opens when the content starts.
//
// Thread-safe: the store has its own lock; a ResponsesTurn belongs to one GenerationJob.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/tokenizer/chat_template.h"
#include "server/api/error_mapping.h"
#include "server/api/reasoning.h"
#include "server/http/response_store.h"

namespace kvserve {

// What a response object repeats of its request.
struct ResponsesTurnInfo {
  std::string id;  // "resp_..."
  std::string model;
  int64_t created_at = 0;
  std::optional<std::string> instructions;
  std::string previous_response_id;
  bool store = true;
  std::optional<int> max_output_tokens;
  float temperature = 1;
  float top_p = 1;
  std::string user;
  // Stored with the response when `store`.
  std::string tenant;
  std::string session_id;
  std::vector<ChatMessage> input;
};

// The output side of one POST /v1/responses: events and the final object; stores the
// response (when asked) once it completed.
class ResponsesTurn {
 public:
  // `reasoning`: the replies carry reasoning in <think> tags (`open`: the prompt opened one).
  ResponsesTurn(ResponsesTurnInfo info, std::shared_ptr<ResponseStore> store,
                ReasoningFormat reasoning = ReasoningFormat::kNone, bool reasoning_open = false);
  ~ResponsesTurn();
  ResponsesTurn(const ResponsesTurn&) = delete;
  ResponsesTurn& operator=(const ResponsesTurn&) = delete;

  std::string StartEvents();                        // created ... content_part.added
  // response.output_text.delta (and reasoning_text.delta with reasoning).
  std::string DeltaEvent(const std::string& text);
  // output_text.done ... response.completed / response.incomplete.
  std::string EndEvents(const RequestUsage& usage, std::optional<FinishReason> finish);
  std::string ErrorEvent(const ApiError& error);
  // Non-streaming: the response object.
  std::string FinalBody(const std::string& text, const RequestUsage& usage, std::optional<FinishReason> finish);

 private:
  std::string Object(const char* status, const RequestUsage* usage, std::optional<FinishReason> finish,
                     bool stored) const;
  // Whether the completed response is stored (asked for, not deleted meanwhile, the state
  // directory writing): what its object says in "store".
  bool WillStore();
  std::string Event(const std::string& type, std::string fields_json);
  void Store(const std::string& object);
  // Streaming with reasoning: the events of a reasoning delta / a content delta, opening and
  // closing the items as the reply moves from one to the other.
  std::string ReasoningEvents(const std::string& text);
  std::string ContentEvents(const std::string& text);
  std::string OpenMessage();
  std::string CloseReasoning();
  int message_index() const { return reasoning_text_.empty() ? 0 : 1; }
  bool ended_ = false;  // stored or dropped: the store forgot the running response

  ResponsesTurnInfo info_;
  std::shared_ptr<ResponseStore> store_;
  std::string message_id_;
  std::string reasoning_id_;
  std::string text_;
  std::string reasoning_text_;
  std::unique_ptr<ReasoningParser> reasoning_;
  bool message_open_ = false;    // streaming: its output_item.added was sent
  bool reasoning_open_ = false;  // streaming: the reasoning item is added and not done
  int sequence_ = 0;
};

// GET /v1/responses/{id}/input_items: the list object (`ascending`: oldest first; OpenAI's
// default order is newest first).
std::string InputItemsJson(const StoredResponse& response, bool ascending);

}  // namespace kvserve
