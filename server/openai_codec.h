// OpenAI request decoding: the JSON body of POST /v1/completions and /v1/chat/completions
// into an OpenAiRequest (still text and messages; the router tokenizes and submits).
//
// Field rules (OpenAI semantics; vLLM's extensions where OpenAI has none):
//   model (string, required), prompt (string | [int] | [string] | [[int]]; completions),
//   messages ([{role, content: string | [{type:"text", text}]}]; chat; "developer" is read as
//   "system"), max_tokens | max_completion_tokens (int >= 0), temperature, top_p, min_p,
//   presence_penalty, frequency_penalty, repetition_penalty (numbers), top_k, n, seed,
//   min_tokens, priority (ints), stop (string | [string] | null), stop_token_ids ([int]),
//   logprobs (completions: int; chat: bool) with top_logprobs (chat: int), logit_bias
//   ({"<token id>": number}), ignore_eos, echo, stream (bools), stream_options
//   ({include_usage: bool}), user, session_id, cache_salt (strings).
// Unknown fields are ignored; null means absent; a known field of the wrong type is an
// INVALID_ARGUMENT ApiError whose `param` names it. Value ranges are checked later by
// SamplingParams::Validate (through Engine::Submit).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/chat_template.h"
#include "engine/sampling_params.h"
#include "server/http_types.h"

namespace kvserve {

enum class ApiKind { kCompletion, kChat };

// One prompt of a completions request: text, or token ids given by the client.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  std::vector<PromptInput> prompts;   // completions: one per batch entry
  std::vector<ChatMessage> messages;  // chat
  SamplingParams sampling;            // max_tokens is filled in by the router when absent
  std::optional<int> max_tokens;      // as given (max_completion_tokens wins for chat)
  int n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool echo = false;                  // completions: prepend the prompt to the text
  bool logprobs = false;              // logprobs requested (sampling.logprobs = top count)
  std::string user;
  std::string session_id;             // extension: server-side chat session
  std::string cache_salt;             // extension: prefix-cache isolation
  int priority = 0;                   // extension: lower runs first
};

// At most this many prompts in one completions batch.
inline constexpr int kMaxBatchPrompts = 64;

// Decodes `body`. On failure fills *error (400, naming the field) and returns false.
[[nodiscard]] bool ParseOpenAiRequest(std::string_view body, ApiKind kind, OpenAiRequest* out,
                                      ApiError* error);

// POST /tokenize: {"prompt" | "text": string, "add_special_tokens": bool = true}.
struct TokenizeRequest {
  std::string text;
  bool add_special_tokens = true;
};
[[nodiscard]] bool ParseTokenizeRequest(std::string_view body, TokenizeRequest* out, ApiError* error);

// POST /detokenize: {"tokens": [int]}.
[[nodiscard]] bool ParseDetokenizeRequest(std::string_view body, std::vector<int32_t>* tokens,
                                          ApiError* error);

}  // namespace kvserve
