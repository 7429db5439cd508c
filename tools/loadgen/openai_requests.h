// The OpenAI wire format as bench-serve needs it: request bodies for /v1/completions and
// /v1/chat/completions, what one streamed event (or a whole non-streamed reply) says
// (content, finish, usage, error), the model id from /v1/models, and prompts of a given
// length built from a word list.
//
// ParseEvent runs once per streamed chunk on the load generator's threads, so it uses a SAX
// pass (no JSON tree is built). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kvserve::bench {

enum class Endpoint { kCompletions, kChat };

// "/v1/completions" or "/v1/chat/completions".
[[nodiscard]] const char* EndpointPath(Endpoint endpoint);

struct RequestSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt;
  int max_tokens = 128;
  double temperature = 0;
  bool ignore_eos = true;     // send "ignore_eos": true (an extension kvserve, llama.cpp, vLLM accept)
  bool stream = true;
  bool include_usage = true;  // stream_options.include_usage
  const nlohmann::json* extra_body = nullptr;  // an object merged last (overrides), or null
  const nlohmann::json* variant = nullptr;     // an object merged after extra_body, or null
};
[[nodiscard]] std::string BuildRequestBody(const RequestSpec& spec);

// What one SSE event's data (or a whole non-streamed reply) carries.
struct EventInfo {
  bool done = false;       // the "[DONE]" sentinel
  bool malformed = false;  // not JSON
  int content_pieces = 0;  // choices whose text / delta.content / message.content is non-empty
  bool finished = false;   // a choice has a finish_reason
  std::optional<int64_t> completion_tokens;  // usage, when present and not null
  std::optional<int64_t> prompt_tokens;
  std::optional<std::string> error;  // an "error" member: its message (or the whole value)
};
[[nodiscard]] EventInfo ParseEvent(std::string_view data);

// The first model id of a /v1/models reply.
[[nodiscard]] StatusOr<std::string> FirstModelId(std::string_view body);

// The message of an OpenAI error body ({"error": {"message": ...}}), else the body's first
// 200 bytes.
[[nodiscard]] std::string ErrorMessage(std::string_view body);

// `num_words` words drawn from a list of short common English words (each one token in
// Llama-style vocabularies), separated by spaces.
[[nodiscard]] std::string WordPrompt(int num_words, std::mt19937_64& rng);

}  // namespace kvserve::bench
