// OpenAI request decoding: the JSON body of POST /v1/completions and /v1/chat/completions
// into an OpenAiRequest (still text and messages; the router tokenizes and submits).
//
// Field rules (OpenAI semantics; vLLM's extensions where OpenAI has none):
//   model (string; may be omitted: the served model), prompt (string | [int] | [string] |
//   [[int]]; completions),
//   messages ([{role, content: string | [{type:"text", text}]}]; chat; "developer" is read as
//   "system"), max_tokens | max_completion_tokens (int >= 0), temperature, top_p, min_p,
//   presence_penalty, frequency_penalty, repetition_penalty (numbers), top_k, n, seed,
//   min_tokens, priority (ints), stop (string | [string] | null), stop_token_ids ([int]),
//   logprobs (completions: int; chat: bool) with top_logprobs (chat: int), logit_bias
//   ({"<token id>": number}), ignore_eos, echo, stream (bools), stream_options
//   ({include_usage: bool}), user, session_id, cache_salt (strings).
// Tools (tools, tool_choice, the older functions / function_call) and response_format (text,
// json_object, json_schema) are read into the request's tool calls and structured output.
// Parameters kvserve does not implement are refused rather than ignored (400 naming them):
// best_of > 1, a non-empty suffix.
// Unknown fields are ignored; null means absent; a known field of the wrong type is an
// INVALID_ARGUMENT ApiError whose `param` names it. n is in [1, kMaxChoices]; other value
// ranges are checked later by SamplingParams::Validate (through Engine::Submit). Bodies nested
// deeper than kMaxJsonDepth are refused before parsing.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "engine/sampling_params.h"
#include "server/http/http_types.h"
#include "server/api/request_builder.h"

namespace kvserve {

// The generation fields (GenerationInput: max_completion_tokens wins over max_tokens for
// chat) plus what only the HTTP response shape needs.
struct OpenAiRequest : GenerationInput {
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool logprobs = false;              // logprobs requested (sampling.logprobs = top count)
  std::string user;
};

// At most this many prompts in one completions batch.
inline constexpr int kMaxBatchPrompts = 64;
// Deeper JSON bodies are refused (no request field nests more than a few levels).
inline constexpr int kMaxJsonDepth = 32;

// Decodes `body`. On failure fills *error (400, naming the field) and returns false.
[[nodiscard]] bool ParseOpenAiRequest(std::string_view body, ApiKind kind, OpenAiRequest* out,
                                      ApiError* error);

// POST /v1/responses (server/http/responses_api.h): "input" (a string: one user message, or
// message items whose content is a string or input_text / output_text parts), "instructions",
// "previous_response_id", "store" (default true), "max_output_tokens" (>= 1), "temperature",
// "top_p", "stream", "model", "user", "metadata" (an object, not kept); "text.format" other
// than text and tools are refused like the chat API's. `generation.messages` holds the input.
struct ResponsesRequest {
  OpenAiRequest generation;
  std::optional<std::string> instructions;
  std::string previous_response_id;
  bool store = true;
};
[[nodiscard]] bool ParseResponsesRequest(std::string_view body, ResponsesRequest* out, ApiError* error);

// POST /tokenize: {"prompt" | "text": string, "add_special_tokens": bool = true}, or
// {"messages": [...], "add_generation_prompt": bool = true, "chat_template_kwargs",
// "continue_final_message"} (rendered with the chat template, as vLLM's /tokenize and kvserve's
// gRPC Tokenize do); "model" as for generation.
struct TokenizeRequest {
  std::string model;
  std::string text;
  bool add_special_tokens = true;
  std::vector<ChatMessage> messages;  // non-empty: a chat prompt
  bool add_generation_prompt = true;
  ChatExtras chat_extras;             // chat_template_kwargs, continue_final_message
};
[[nodiscard]] bool ParseTokenizeRequest(std::string_view body, TokenizeRequest* out, ApiError* error);

// POST /detokenize: {"tokens": [int]}.
[[nodiscard]] bool ParseDetokenizeRequest(std::string_view body, std::vector<int32_t>* tokens,
                                          ApiError* error);

}  // namespace kvserve
