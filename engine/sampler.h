// Sampler: picks one sequence's next token from the model's logits under its SamplingParams.
//
// One Sampler per sequence. It owns the sequence's RNG (std::mt19937_64, seeded with
// params.seed or else the caller's default seed, e.g. derived from the request id; uniforms
// are built from the raw 64-bit output, so a seed gives the same draws on every platform) and
// the token counts the penalties need. Same seed + same params + same logits => same tokens.
// (For n > 1 choices the caller derives a distinct default seed per choice.)
//
// Sample() pipeline, in this order:
//   logit_bias → repetition penalty (prompt + generated) → frequency/presence penalties
//   (generated) → EOS/stop-id masking (ignore_eos, min_tokens) → the structured output's
//   mask (tokens its grammar does not allow) → greedy argmax (temperature 0
//   or top_k == 1; lowest id on ties) | temperature → top_k → top_p → min_p → one draw.
// top_k/top_p/min_p keep a prefix of the canonical order "logit descending, id ascending";
// top_p's mass is measured over the top_k survivors (as vLLM/HF do).
//
// Cost per call (vocab V): greedy is one argmax pass. Otherwise O(V) with no full sort:
// top_k <= 1024 is a bounded heap over the logits (then everything runs on the k survivors);
// larger top_k finds the k-th best with nth_element; weights exp((l - max) / T) are one
// vectorised pass; top_p keeps as candidates only tokens whose weight could be in the nucleus
// and finds the cut by quickselect on mass. No allocation per call once the scratch buffers
// have grown, except the returned top_logprobs list when logprobs >= 0.
//
// Determinism: the chosen token depends only on the seed, params and logits, bit for bit on
// any platform: the RNG and exp are our own code, sums have a fixed association, and
// candidates are walked in id order or canonical order, never in an order left to the
// standard library (nth_element only finds a uniquely defined element).
//
// Logprobs (params.logprobs >= 0) are log-softmax of the RAW logits, before bias, penalties
// and temperature, as vLLM/OpenAI report them.
//
// Invariants: num_generated() == number of Accept() calls; counts are tracked only when a
// penalty is active. Memory per Sampler is O(distinct tokens seen), not O(vocab): the
// vocab-sized buffers live in a SamplerScratch, which the engine may share between samplers.
//
// Thread-safety: none. A Sampler (and a SamplerScratch) is used by the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/grammar/token_mask.h"
#include "engine/sampling_params.h"

namespace kvserve {

struct SampledToken {
  int32_t id = -1;
  // log softmax(raw logits)[id]; 0 when params.logprobs < 0.
  float logprob = 0.0f;
  // The params.logprobs most likely tokens under the raw logits as (id, logprob), logprob
  // descending, ties by lower id; empty when params.logprobs <= 0.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// The n most likely tokens under log_softmax(raw_logits) as (id, logprob), sorted by logprob
// descending, ties by lower id. n is clamped to [0, raw_logits.size()]. NaN logits are
// ignored; if every logit is -inf the logprobs are -inf. O(vocab * log-ish n), one pass for
// the selection and one for the normaliser.
[[nodiscard]] std::vector<std::pair<int32_t, float>> TopLogprobs(
    std::span<const float> raw_logits, int n);

// How likely token `id` is under log_softmax(raw_logits), with the top_n most likely tokens as
// TopLogprobs gives them (none when top_n <= 0): prompt logprobs. REQUIRES: id in range.
[[nodiscard]] SampledToken ScoreToken(std::span<const float> raw_logits, int32_t id, int top_n);

// Sets every logit whose token `allowed` lacks (ids past its size included) to -inf.
void MaskDisallowed(std::span<float> logits, const TokenMask& allowed);

// Reusable vocab-sized buffers for Sampler::Sample. Sample is synchronous, so one scratch per
// engine thread serves every sequence; it grows on first use and is never shrunk.
class SamplerScratch {
 public:
  SamplerScratch() = default;

  // Implementation detail of Sampler (public only so its helpers can name it).
  struct Candidate {
    float logit;   // processed logit (after bias, penalties, masking)
    int32_t id;
    float weight;  // exp((logit - max) / temperature) = p / p_max
  };

 private:
  friend class Sampler;
  std::vector<float> raw_logits;      // [vocab] copy of the raw logits (logprobs only)
  std::vector<float> weights;         // [vocab] p / p_max by token id
  std::vector<Candidate> candidates;  // [<= vocab] tokens still in the running
};

class Sampler {
 public:
  // eos_token_ids: the model's end-of-sequence ids (masked while num_generated() <
  // params.min_tokens, and always when params.ignore_eos).
  // REQUIRES: params.Validate(vocab_size).ok(); every eos id in [0, vocab_size).
  Sampler(SamplingParams params, int vocab_size, uint64_t default_seed,
          std::vector<int32_t> eos_token_ids);

  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;

  // Records prompt tokens for the repetition penalty. REQUIRES: ids in [0, vocab_size).
  void AddPromptTokens(std::span<const int32_t> tokens);
  // Records a generated token (the one returned by Sample, or a forced one).
  // REQUIRES: token in [0, vocab_size).
  void Accept(int32_t token);

  // Picks the next token. `logits` is the raw model output for this sequence's next position,
  // [vocab_size]; it is overwritten (used as scratch). Does not Accept() the token.
  // The first form uses buffers owned by this Sampler (allocated on first use); the second
  // uses the caller's, so that many live sequences share one set of vocab-sized buffers.
  // REQUIRES: logits.size() == vocab_size.
  // `allowed` (structured outputs), when given, masks every other token after the penalties
  // (logprobs stay those of the raw logits, as vLLM reports them).
  // If every token is masked (-inf) or NaN — a broken model — returns id 0 (the caller checks
  // a result against `allowed`).
  [[nodiscard]] SampledToken Sample(std::span<float> logits);
  [[nodiscard]] SampledToken Sample(std::span<float> logits, SamplerScratch& scratch,
                                    const TokenMask* allowed = nullptr);

  // The first half of Sample, in place: logit_bias, penalties, EOS/stop-id masking. Exposed
  // for tests and for callers that want processed logits. REQUIRES: as for Sample.
  void ProcessLogits(std::span<float> logits) const;

  // True when generating `token` ends the sequence: one of params.stop_token_ids, or an EOS
  // id unless params.ignore_eos.
  [[nodiscard]] bool IsStopToken(int32_t token) const;
  // False while EOS must not be sampled: ignore_eos, or fewer than min_tokens generated.
  [[nodiscard]] bool eos_allowed() const {
    return !params_.ignore_eos && num_generated_ >= params_.min_tokens;
  }

  [[nodiscard]] const SamplingParams& params() const { return params_; }
  [[nodiscard]] int vocab_size() const { return vocab_size_; }
  [[nodiscard]] uint64_t seed() const { return seed_; }
  [[nodiscard]] int num_generated() const { return num_generated_; }

 private:
  struct TokenCount {
    int32_t id;
    uint32_t generated;  // times generated (0: seen in the prompt only)
  };

  TokenCount& CountFor(int32_t token);
  // Picks a token from processed logits (used as scratch). REQUIRES: not greedy.
  [[nodiscard]] int32_t Draw(std::span<float> logits, SamplerScratch& scratch);
  // Draws one of `cand` in proportion to its weight, walking them in their given order.
  [[nodiscard]] int32_t DrawFromCandidates(std::span<const SamplerScratch::Candidate> cand);
  // Uniform double in [0, 1) from the top 53 bits of one RNG draw.
  [[nodiscard]] double NextUniform();

  SamplingParams params_;
  int vocab_size_;
  uint64_t seed_;
  std::vector<int32_t> eos_token_ids_;
  std::mt19937_64 rng_;
  int num_generated_ = 0;

  // Distinct tokens seen (prompt, when the repetition penalty is on, or generated), tracked
  // only when params_.HasPenalties(). Every entry is in the repetition penalty's set.
  std::vector<TokenCount> counts_;
  std::unordered_map<int32_t, uint32_t> count_index_;  // token id -> index in counts_

  std::unique_ptr<SamplerScratch> own_scratch_;  // for Sample(logits); created on first use
};

}  // namespace kvserve
