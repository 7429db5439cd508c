// What a front end submits to the engine and what comes back: GenerationRequest in,
// StreamDelta / RequestUsage out. Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/grammar/output_spec.h"
#include "engine/sampling_params.h"

namespace kvserve {

// Limits every front end shares (the engine enforces them in Submit).
inline constexpr int kMaxChoices = 16;            // n in [1, kMaxChoices] (and <= max_num_seqs)
inline constexpr size_t kMaxSessionIdBytes = 256;
inline constexpr int kMinPriority = -100;         // priorities are clamped to this range
inline constexpr int kMaxPriority = 100;

enum class FinishReason { kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error" (OpenAI's finish_reason for the first two).
std::string_view FinishReasonName(FinishReason reason);

struct GenerationRequest {
  std::vector<int32_t> prompt_tokens;  // BOS included when the model wants one
  SamplingParams sampling;
  int n = 1;                   // independent choices; their prompts share KV blocks
  std::string session_id;      // optional chat session: its KV cache is kept between turns
  // When the session is busy with another request: run without it (the prefix cache still
  // serves) instead of waiting for it and failing with FAILED_PRECONDITION. For forks of one
  // conversation (two continuations of one stored response); needs the request to fit
  // max_model_len without the session's window.
  bool session_if_free = false;
  std::string cache_salt;      // prefix-cache isolation domain (e.g. per tenant)
  std::string tenant;          // who owns a session (per-key session limits)
  int priority = 0;            // lower runs first; FCFS within a priority; clamped to
                               // [kMinPriority, kMaxPriority]
  bool detokenize = true;      // produce text deltas (and honour stop strings)
  // The output must match this (a JSON Schema, a regex, a grammar...): each sampled token is
  // drawn from the tokens it allows, and end-of-text only where it may end. Compiled by
  // Submit (cached by content); an unsupported or malformed one fails Submit.
  StructuredOutputSpec structured;
  // Control tokens whose text the output carries (markup the reply is read by: harmony's
  // <|channel|>, <|message|>, ...); other control tokens have no text.
  std::vector<std::string> shown_controls;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;                           // NaN: none (the first prompt token)
  std::vector<std::pair<int32_t, float>> top;  // when requested
};

// New output of one choice since the last delta.
struct StreamDelta {
  int index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;          // parallel to token_ids when requested
  // sampling.prompt_logprobs >= 0: one entry per prompt token (the first has a NaN logprob),
  // in one delta of choice 0 before any generated token.
  std::vector<TokenLogprob> prompt_logprobs;
  std::optional<FinishReason> finish_reason;   // set on the choice's last delta
  std::string matched_stop;                    // the stop string that ended it, if any
};

struct RequestUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;         // all choices
  int cached_prompt_tokens = 0;      // served from the prefix cache or the chat session
  double time_to_first_token_s = 0;  // submit -> first token
  double duration_s = 0;             // submit -> finish
  int preemptions = 0;
};

}  // namespace kvserve
