// OpenAI response encoding: complete responses, streaming chunks (SSE events), usage and
// error bodies, in the exact shapes of the OpenAI API:
//
//   text_completion        {"id","object":"text_completion","created","model",
//                           "choices":[{"index","text","logprobs","finish_reason"}],"usage"}
//   chat.completion        choices[{"index","message":{"role":"assistant","content"},
//                           "logprobs","finish_reason"}]; with tool calls "content" is null
//                           when empty, "tool_calls" follows it and a stop is "tool_calls"
//                           (openai_tools.h)
//   chunks                 the same with "object":"text_completion" /
//                           "chat.completion.chunk" and a "delta" instead of "message";
//                           "usage": null on every chunk when include_usage, and a last chunk
//                           with "choices": [] and the usage.
//   logprobs (completions) {"tokens","token_logprobs","top_logprobs":[{token: logprob}],
//                           "text_offset"}; with echo, the prompt tokens come first and the
//                           first one has null token_logprobs / top_logprobs entries
//   logprobs (chat)        {"content":[{"token","logprob","bytes","top_logprobs":
//                           [{"token","logprob","bytes"}]}]}
//   usage                  {"prompt_tokens","completion_tokens","total_tokens",
//                           "prompt_tokens_details":{"cached_tokens"}}
// Every event is framed as SSE: "data: <json>\n\n"; the stream ends with "data: [DONE]\n\n".
// Invalid UTF-8 in token pieces is replaced by U+FFFD. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache_stats.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/request.h"
#include "server/http/http_types.h"
#include "server/api/reasoning.h"
#include "server/api/tool_calls.h"
#include "server/http/openai_codec.h"

namespace kvserve {

// `j` as compact JSON text; a string that is not valid UTF-8 (a token piece split a character)
// has U+FFFD in its place rather than failing: what the API's replies are written with.
std::string DumpJson(const nlohmann::ordered_json& j);

class ResponsesTurn;  // responses_api.h

// What every response and chunk of one HTTP request shares.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;         // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;    // unix seconds
  std::string model;
  bool logprobs = false;  // include logprobs objects (else null)
  bool include_usage = false;
  // Set for POST /v1/responses: its objects and events replace the chat completion's.
  std::shared_ptr<ResponsesTurn> responses;
  // Chat with tools the model may call: the replies are read for calls in this syntax, with
  // these tools' parameter types.
  std::optional<ToolSyntax> tools;
  std::vector<ToolDefinition> tool_definitions;
  // Chat: the replies' <think> part is returned apart (reasoning_content and reasoning); the
  // prompt already opened it.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool reasoning_open = false;
};

// One choice of a complete (non-streaming) response.
struct ChoiceResult {
  int index = 0;
  std::string text;                      // echo prefix included
  std::vector<TokenLogprob> logprobs;    // generated tokens, when requested
  int text_offset_base = 0;              // bytes of echoed prompt before the first token
  std::optional<FinishReason> finish;
  std::vector<ToolCall> tool_calls;      // chat: message.tool_calls (finish "tool_calls")
  std::string reasoning;                 // chat: message.reasoning_content and .reasoning
  int reasoning_tokens = 0;              // chat: tokens whose text was reasoning only
};

// One choice's part of a streaming chunk.
struct ChunkChoice {
  int index = 0;
  std::string text;
  bool first = false;                    // chat: carries {"role":"assistant"}
  std::span<const TokenLogprob> logprobs;
  int text_offset = 0;                   // completions: offset of this text in the choice
  std::optional<FinishReason> finish;
  std::span<const ToolCallParser::CallFragment> tool_calls;  // chat: delta.tool_calls
  std::string reasoning;                 // chat: delta.reasoning_content and delta.reasoning
  bool called_tools = false;             // with finish: "tool_calls" instead of "stop"
};

// "stop" | "length" | "abort" | "error".
std::string FinishReasonString(FinishReason reason);

std::string FormatResponse(const ResponseMeta& meta, std::span<const ChoiceResult> choices,
                           const RequestUsage& usage, const Tokenizer& tok);
// One SSE event with one choice.
std::string FormatChunkEvent(const ResponseMeta& meta, const ChunkChoice& choice, const Tokenizer& tok);
// The include_usage event: "choices": [] and the usage. A chat reply that may reason has
// usage.completion_tokens_details.reasoning_tokens (FormatResponse: the choices' sum).
std::string FormatUsageEvent(const ResponseMeta& meta, const RequestUsage& usage, int reasoning_tokens = 0);
// An error inside a stream that has begun: data: {"error": {...}}.
std::string FormatErrorEvent(const ApiError& error);
inline constexpr char kDoneEvent[] = "data: [DONE]\n\n";

// {"error":{"message","type","param","code"}}
std::string FormatErrorBody(const ApiError& error);
// The reply for an error: status from error mapping, Retry-After on 429 and 503.
HttpReply ErrorReply(const ApiError& error);

// The other routes' JSON replies (here so the router need not include nlohmann):
// /v1/models, /v1/models/{id}, /tokenize {"tokens","count","max_model_len"},
// /detokenize {"prompt"}, /health and /ready {"status"}.
HttpReply ModelsReply(const std::string& model_id, int64_t created, int max_model_len);
HttpReply ModelReply(const std::string& model_id, int64_t created, int max_model_len);
HttpReply TokenizeReply(std::span<const int32_t> tokens, int max_model_len);
HttpReply DetokenizeReply(const std::string& text);
HttpReply StatusReply(int status, const std::string& state);  // {"status": state}
// GET /debug/cache: {"integrity": "ok" | "failed", "message", "blocks": {"total", "used", "free",
// "cached", "pinned"}, "tokens_stored"}; 200 when the check passed, 500 when it failed.
HttpReply DebugCacheReply(const Status& integrity, const KvCacheStats& stats);

}  // namespace kvserve
