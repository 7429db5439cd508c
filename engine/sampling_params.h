// SamplingParams: how one sequence picks its next token and when it stops (OpenAI/vLLM
// semantics). A plain value built by the front end from the request and checked once with
// Validate() before it reaches the engine; everything downstream (Sampler, StopMatcher,
// scheduler) may then assume the ranges below hold and CHECKs them where cheap.
//
// Semantics, in the order the Sampler applies them:
//   logit_bias         logits[id] += bias.
//   repetition_penalty CTRL-style, over prompt + generated tokens (as vLLM): a positive logit
//                      is divided by it, a non-positive one multiplied. 1 = off.
//   frequency_penalty  logits[id] -= frequency_penalty * (times id was generated).
//   presence_penalty   logits[id] -= presence_penalty  * (id was generated at least once).
//                      Both count generated tokens only, not the prompt (OpenAI).
//   EOS suppression    the model's EOS id(s) are masked (-inf) when ignore_eos, and EOS plus
//                      stop_token_ids are masked while fewer than min_tokens were generated.
//   temperature        < kGreedyTemperature (i.e. 0) => greedy: argmax, lowest id on ties.
//   top_k → top_p → min_p, then one draw from the renormalised distribution.
//
// Plain value; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvserve {

struct SamplingParams {
  // Temperatures below this are treated as 0 (greedy), as vLLM does: dividing logits by a
  // tiny temperature only amplifies float noise.
  static constexpr float kGreedyTemperature = 1e-5f;
  static constexpr float kMaxPenalty = 2.0f;       // presence/frequency in [-2, 2]
  static constexpr float kMaxLogitBias = 100.0f;   // bias in [-100, 100]
  static constexpr int kMaxStopStrings = 16;
  static constexpr int kMaxStopStringBytes = 256;
  static constexpr int kMaxLogprobs = 20;

  float temperature = 1.0f;         // >= 0, finite; 0 => greedy (argmax after penalties/bias)
  int top_k = 0;                    // 0 or -1 => off; k >= 1 keeps the k most likely
  float top_p = 1.0f;               // (0, 1]; 1 => off
  float min_p = 0.0f;               // [0, 1]; keeps p >= min_p * p_max; 0 => off
  float repetition_penalty = 1.0f;  // > 0, finite; 1 => off
  float presence_penalty = 0.0f;    // [-2, 2], over generated tokens
  float frequency_penalty = 0.0f;   // [-2, 2], over generated tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // id in [0, vocab), bias in [-100, 100],
                                                      // each id at most once
  std::optional<uint64_t> seed;     // same seed + same request => same output
  int max_tokens = 16;              // >= 0 (0: only prompt processing / echo)
  int min_tokens = 0;               // [0, max_tokens]; EOS and stop ids masked until reached
  bool ignore_eos = false;          // never stop on (and never sample) the model's EOS
  std::vector<std::string> stop;    // stop strings, never emitted; <= 16, each 1..256 bytes
  std::vector<int32_t> stop_token_ids;  // each in [0, vocab)
  int logprobs = -1;                // -1: none; N in [0, 20]: chosen token's logprob + top N
  // -1: none; N in [0, 20]: the log-probability of every prompt token given the ones before it
  // (raw logits) + the top N there (OpenAI's echo with logprobs). The prompt is then computed
  // in full (no prefix-cache hit) and in chunks of at most max_num_seqs tokens.
  int prompt_logprobs = -1;

  // OK, or INVALID_ARGUMENT naming the first offending field and its allowed range.
  // REQUIRES: vocab_size > 0.
  [[nodiscard]] Status Validate(int vocab_size) const;

  [[nodiscard]] bool IsGreedy() const { return temperature < kGreedyTemperature; }
  // True when any of repetition/presence/frequency penalty is active.
  [[nodiscard]] bool HasPenalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

}  // namespace kvserve
