#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace kvserve {
namespace {

using Candidate = SamplerScratch::Candidate;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// top_k up to this uses a bounded heap over the logits (O(vocab), k-sized memory); larger k
// finds the k-th best with nth_element and masks the rest.
constexpr size_t kHeapTopKLimit = 1024;
// Weights are summed in blocks of this many; the draw skips whole blocks.
constexpr size_t kBlock = 1024;
// Ranges this small are sorted outright by the top_p selection.
constexpr size_t kSortRange = 16;

// Canonical order: larger logit first, then lower id. A strict total order (no NaN enters).
bool Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// exp(x) for x <= 0, within 1e-7 relative (Cephes-style range reduction and polynomial);
// exactly 1 at 0 and exactly 0 below -87, at -inf and for NaN. Branch-free on the bits, so
// loops over it vectorise, and the same bits on every platform (no libm involved).
[[gnu::always_inline]] inline float ExpNonPositive(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t under = (bits & 0x7fffffffu) > 0x42ae0000u ? 0xffffffffu : 0u;  // |x| > 87
  const float c = std::bit_cast<float>((bits & ~under) | (0xc2ae0000u & under));  // max(x, -87)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds
  const float n = (c * kLog2e + kRound) - kRound;                  // in [-126, 0]
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;    // c - n * ln 2, |r| <= 0.35
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t scale = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;  // 2^n
  const float y = p * std::bit_cast<float>(scale);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(y) & ~under);
}

// Sum in double with a fixed association (8 lanes, then pairwise), so it vectorises and gives
// the same result everywhere.
double SumInOrder(std::span<const float> values) {
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= values.size(); i += 8) {
    for (size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(values[i + j]);
  }
  for (; i < values.size(); ++i) lanes[0] += static_cast<double>(values[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Largest value ignoring NaN; -inf if there is none.
float MaxOf(std::span<const float> logits) {
  float max_value = kNegInf;
  for (float x : logits) max_value = x > max_value ? x : max_value;
  return max_value;
}

// Index of the largest logit, lowest id on ties; NaN never wins. 0 if none beats -inf.
int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// log(sum(exp(x))) over the non-NaN entries; -inf when all are -inf, +inf if any is +inf.
double LogSumExp(std::span<const float> logits) {
  const float max_value = MaxOf(logits);
  if (!std::isfinite(max_value)) return max_value;
  float block[kBlock];  // exp(x - max) for one block
  double sum = 0.0;
  for (size_t start = 0; start < logits.size(); start += kBlock) {
    const size_t len = std::min(kBlock, logits.size() - start);
    for (size_t j = 0; j < len; ++j) block[j] = ExpNonPositive(logits[start + j] - max_value);
    sum += SumInOrder({block, len});
  }
  return static_cast<double>(max_value) + std::log(sum);
}

float LogprobOf(float raw_logit, double log_z) {
  if (log_z == -std::numeric_limits<double>::infinity()) return kNegInf;
  return static_cast<float>(static_cast<double>(raw_logit) - log_z);
}

// The n largest (id, logit), logit descending, ties by lower id; NaN skipped. One pass with a
// bounded sorted buffer: most entries fail the `x > worst kept` test, so this is ~O(vocab).
void SelectTopN(std::span<const float> logits, size_t n,
                std::vector<std::pair<int32_t, float>>& out) {
  out.clear();
  n = std::min(n, logits.size());
  if (n == 0) return;
  out.reserve(n);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x)) continue;
    if (out.size() == n) {
      if (!(x > out.back().second)) continue;  // equal logit: the kept one has the lower id
      out.pop_back();
    }
    // First kept entry with a smaller logit: equal logits stay ahead (lower ids).
    auto pos = std::upper_bound(out.begin(), out.end(), x,
                                [](float v, const std::pair<int32_t, float>& e) {
                                  return v > e.second;
                                });
    out.insert(pos, {static_cast<int32_t>(i), x});
  }
}

std::vector<std::pair<int32_t, float>> TopLogprobsWithNormaliser(std::span<const float> logits,
                                                                 int n, double log_z) {
  std::vector<std::pair<int32_t, float>> top;
  if (n <= 0) return top;
  SelectTopN(logits, static_cast<size_t>(n), top);
  for (auto& entry : top) entry.second = LogprobOf(entry.second, log_z);
  return top;
}

// The k best finite logits as candidates, sorted canonically (weights not yet set). A bounded
// heap whose front is the worst kept; ids arrive in increasing order, so a tie never displaces.
void SelectTopK(std::span<const float> logits, size_t k, std::vector<Candidate>& out) {
  out.clear();
  out.reserve(k);
  float worst_kept = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (!(x > kNegInf)) continue;
    if (out.size() < k) {
      out.push_back(Candidate{x, static_cast<int32_t>(i), 0.0f});
      std::push_heap(out.begin(), out.end(), Better);
      worst_kept = out.front().logit;
    } else if (x > worst_kept) {
      std::pop_heap(out.begin(), out.end(), Better);
      out.back() = Candidate{x, static_cast<int32_t>(i), 0.0f};
      std::push_heap(out.begin(), out.end(), Better);
      worst_kept = out.front().logit;
    }
  }
  std::sort(out.begin(), out.end(), Better);  // unique result: the order is total
}

// Length of the shortest prefix of canonically sorted `cand` whose mass reaches `target`
// (a token is kept while the mass before it is < target); all of them if it never does.
size_t SortedPrefixReaching(std::span<const Candidate> cand, double target) {
  double mass_before = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) {
    if (mass_before >= target) return i;
    mass_before += cand[i].weight;
  }
  return cand.size();
}

// Rearranges `cand` so that its first N entries are the top_p nucleus — the shortest prefix
// of the canonical order whose mass reaches `target` — and returns N. Quickselect on mass with
// our own (deterministic) partition: expected O(n), no full sort. Falls back to sorting the
// remaining range if pivots keep being poor.
size_t SelectNucleus(std::vector<Candidate>& cand, double target) {
  size_t lo = 0;
  size_t hi = cand.size();
  double mass_before = 0.0;  // mass of cand[0, lo): kept, and better than all of cand[lo, hi)
  int rounds_left = 64;
  while (hi - lo > kSortRange && rounds_left-- > 0) {
    // Median of three as pivot, parked at hi - 1.
    const size_t mid = lo + (hi - lo) / 2;
    if (Better(cand[mid], cand[lo])) std::swap(cand[mid], cand[lo]);
    if (Better(cand[hi - 1], cand[lo])) std::swap(cand[hi - 1], cand[lo]);
    if (Better(cand[mid], cand[hi - 1])) std::swap(cand[mid], cand[hi - 1]);
    const Candidate pivot = cand[hi - 1];
    size_t store = lo;
    double upper_mass = 0.0;  // mass of the entries better than the pivot
    for (size_t j = lo; j + 1 < hi; ++j) {
      if (Better(cand[j], pivot)) {
        upper_mass += cand[j].weight;
        std::swap(cand[store++], cand[j]);
      }
    }
    std::swap(cand[store], cand[hi - 1]);
    if (mass_before + upper_mass >= target) {
      hi = store;  // the nucleus ends at or before the pivot
    } else {
      mass_before += upper_mass + pivot.weight;  // all of them and the pivot are kept
      lo = store + 1;
    }
  }
  const auto first = cand.begin() + static_cast<std::ptrdiff_t>(lo);
  std::sort(first, cand.begin() + static_cast<std::ptrdiff_t>(hi), Better);
  for (size_t i = lo; i < hi; ++i) {
    if (mass_before >= target) return i;
    mass_before += cand[i].weight;
  }
  return hi;
}

// The first id at which the running sum of weights (id order) exceeds `threshold`; whole
// blocks are skipped by their sums. Falls back to the last positive weight (rounding).
int32_t WalkInIdOrder(std::span<const float> weights, double threshold) {
  double running = 0.0;
  size_t i = 0;
  for (; i + kBlock <= weights.size(); i += kBlock) {
    const double block = SumInOrder(weights.subspan(i, kBlock));
    if (running + block > threshold) break;
    running += block;
  }
  for (; i < weights.size(); ++i) {
    running += static_cast<double>(weights[i]);
    if (running > threshold) return static_cast<int32_t>(i);
  }
  for (size_t j = weights.size(); j-- > 0;) {
    if (weights[j] > 0.0f) return static_cast<int32_t>(j);
  }
  return 0;
}

}  // namespace

SampledToken ScoreToken(std::span<const float> raw_logits, int32_t id, int top_n) {
  CHECK(id >= 0 && static_cast<size_t>(id) < raw_logits.size()) << "token " << id << " outside the logits";
  const double log_z = LogSumExp(raw_logits);
  SampledToken out;
  out.id = id;
  out.logprob = LogprobOf(raw_logits[static_cast<size_t>(id)], log_z);
  if (top_n > 0) out.top_logprobs = TopLogprobsWithNormaliser(raw_logits, top_n, log_z);
  return out;
}

std::vector<std::pair<int32_t, float>> TopLogprobs(std::span<const float> raw_logits, int n) {
  if (n <= 0 || raw_logits.empty()) return {};
  return TopLogprobsWithNormaliser(raw_logits, n, LogSumExp(raw_logits));
}

Sampler::Sampler(SamplingParams params, int vocab_size, uint64_t default_seed,
                 std::vector<int32_t> eos_token_ids)
    : params_(std::move(params)),
      vocab_size_(vocab_size),
      seed_(params_.seed.value_or(default_seed)),
      eos_token_ids_(std::move(eos_token_ids)),
      rng_(seed_) {
  const Status status = params_.Validate(vocab_size_);
  CHECK(status.ok()) << "Sampler built from unvalidated params: " << status.ToString();
  for (int32_t id : eos_token_ids_) {
    CHECK(id >= 0 && id < vocab_size_) << "eos id " << id << " outside vocab " << vocab_size_;
  }
}

Sampler::TokenCount& Sampler::CountFor(int32_t token) {
  auto [it, inserted] = count_index_.try_emplace(token, static_cast<uint32_t>(counts_.size()));
  if (inserted) counts_.push_back(TokenCount{token, 0});
  return counts_[it->second];
}

void Sampler::AddPromptTokens(std::span<const int32_t> tokens) {
  for (int32_t token : tokens) {
    CHECK(token >= 0 && token < vocab_size_) << "prompt token " << token;
  }
  // Only the repetition penalty looks at the prompt.
  if (params_.repetition_penalty == 1.0f) return;
  for (int32_t token : tokens) CountFor(token);
}

void Sampler::Accept(int32_t token) {
  CHECK(token >= 0 && token < vocab_size_) << "generated token " << token;
  ++num_generated_;
  if (params_.HasPenalties()) ++CountFor(token).generated;
}

bool Sampler::IsStopToken(int32_t token) const {
  const auto& stop_ids = params_.stop_token_ids;
  if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) return true;
  return !params_.ignore_eos &&
         std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
}

void Sampler::ProcessLogits(std::span<float> logits) const {
  CHECK_EQ(logits.size(), static_cast<size_t>(vocab_size_));
  for (const auto& [id, bias] : params_.logit_bias) logits[id] += bias;

  if (params_.HasPenalties()) {
    const float repetition = params_.repetition_penalty;
    for (const TokenCount& count : counts_) {
      float& x = logits[count.id];
      if (repetition != 1.0f) x = x > 0.0f ? x / repetition : x * repetition;
      if (count.generated > 0) {
        x -= params_.frequency_penalty * static_cast<float>(count.generated);
        x -= params_.presence_penalty;
      }
    }
  }

  if (!eos_allowed()) {
    for (int32_t id : eos_token_ids_) logits[id] = kNegInf;
  }
  if (num_generated_ < params_.min_tokens) {
    for (int32_t id : params_.stop_token_ids) logits[id] = kNegInf;
  }
}

void MaskDisallowed(std::span<float> logits, const TokenMask& allowed) {
  const std::span<const uint64_t> words = allowed.words();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < words.size() ? words[w] : 0;  // ids past the mask: not allowed
    if (bits == ~uint64_t{0}) continue;
    const size_t begin = w * 64;
    const size_t end = std::min(n, begin + 64);
    for (size_t i = begin; i < end; ++i) {
      if (((bits >> (i - begin)) & 1) == 0) logits[i] = kNegInf;
    }
  }
}

double Sampler::NextUniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

SampledToken Sampler::Sample(std::span<float> logits) {
  if (!own_scratch_) own_scratch_ = std::make_unique<SamplerScratch>();
  return Sample(logits, *own_scratch_);
}

SampledToken Sampler::Sample(std::span<float> logits, SamplerScratch& scratch, const TokenMask* allowed) {
  CHECK_EQ(logits.size(), static_cast<size_t>(vocab_size_));
  SampledToken out;
  const bool want_logprobs = params_.logprobs >= 0;
  double raw_log_z = 0.0;
  if (want_logprobs) {
    scratch.raw_logits.assign(logits.begin(), logits.end());
    raw_log_z = LogSumExp(logits);
    out.top_logprobs = TopLogprobsWithNormaliser(logits, params_.logprobs, raw_log_z);
  }
  ProcessLogits(logits);
  if (allowed != nullptr) MaskDisallowed(logits, *allowed);
  out.id = params_.IsGreedy() || params_.top_k == 1 ? Argmax(logits) : Draw(logits, scratch);
  if (want_logprobs) out.logprob = LogprobOf(scratch.raw_logits[out.id], raw_log_z);
  return out;
}

int32_t Sampler::DrawFromCandidates(std::span<const Candidate> cand) {
  double mass = 0.0;
  for (const Candidate& c : cand) mass += static_cast<double>(c.weight);
  const double threshold = NextUniform() * mass;
  double running = 0.0;
  for (const Candidate& c : cand) {
    running += static_cast<double>(c.weight);
    if (running > threshold) return c.id;
  }
  // Only reachable through rounding (threshold == mass): the last token with weight.
  for (auto it = cand.rbegin(); it != cand.rend(); ++it) {
    if (it->weight > 0.0f) return it->id;
  }
  return cand.front().id;
}

int32_t Sampler::Draw(std::span<float> logits, SamplerScratch& scratch) {
  const float max_logit = MaxOf(logits);
  // Nothing finite to normalise against (all masked, or +inf): fall back to the argmax.
  if (!(max_logit > kNegInf) || max_logit == kPosInf) return Argmax(logits);
  const float temperature = params_.temperature;
  const size_t vocab = logits.size();
  const size_t top_k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : vocab;
  const bool top_p_on = params_.top_p < 1.0f;
  const float min_p = params_.min_p;
  std::vector<Candidate>& cand = scratch.candidates;

  // Small top_k: everything happens on the k survivors, sorted canonically.
  if (top_k <= kHeapTopKLimit && top_k < vocab) {
    SelectTopK(logits, top_k, cand);
    double total = 0.0;  // top_p's normaliser: the mass after top_k
    for (Candidate& c : cand) {
      c.weight = ExpNonPositive((c.logit - max_logit) / temperature);
      total += static_cast<double>(c.weight);
    }
    size_t keep = cand.size();
    // min_p: p >= min_p * p_max <=> weight >= min_p; weights fall along the sorted order and
    // the best weighs exactly 1, so this trims a suffix and keeps at least one.
    while (keep > 1 && cand[keep - 1].weight < min_p) --keep;
    if (top_p_on) {
      keep = std::min(keep, SortedPrefixReaching(cand, static_cast<double>(params_.top_p) * total));
    }
    return DrawFromCandidates({cand.data(), keep});
  }

  // Large top_k: find the k-th best (a unique element, whatever nth_element's arrangement)
  // and mask everything worse.
  if (top_k < vocab) {
    cand.clear();
    for (size_t i = 0; i < vocab; ++i) {
      if (logits[i] > kNegInf) cand.push_back(Candidate{logits[i], static_cast<int32_t>(i), 0.0f});
    }
    if (top_k < cand.size()) {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(top_k - 1),
                       cand.end(), Better);
      const Candidate worst_kept = cand[top_k - 1];
      for (size_t i = 0; i < vocab; ++i) {
        if (Better(worst_kept, Candidate{logits[i], static_cast<int32_t>(i), 0.0f})) {
          logits[i] = kNegInf;
        }
      }
    }
  }

  // Temperature: weight = p / p_max = exp((logit - max) / T), by id; masked and NaN weigh 0.
  std::vector<float>& weights = scratch.weights;
  weights.resize(vocab);
  {
    const float* in = logits.data();  // plain pointers: the loop vectorises
    float* out = weights.data();
    for (size_t i = 0; i < vocab; ++i) out[i] = ExpNonPositive((in[i] - max_logit) / temperature);
  }
  const double total = SumInOrder(weights);  // top_p's normaliser: the mass after top_k

  // min_p: weight >= min_p. min_p does not change top_p's normaliser, so it can run first.
  // Weights are >= 0, so comparing bit patterns as integers orders them (and vectorises).
  if (min_p > 0.0f) {
    const uint32_t min_bits = std::bit_cast<uint32_t>(min_p);
    for (float& w : weights) {
      w = std::bit_cast<uint32_t>(w) >= min_bits ? w : 0.0f;
    }
  }

  if (top_p_on) {
    // Every token of weight < t is outside the nucleus: together they weigh < vocab * t =
    // (1 - top_p) * total, so the tokens of weight >= t already reach the target. Only
    // those become candidates (a few, for a peaked distribution).
    const double target = static_cast<double>(params_.top_p) * total;
    const float t = static_cast<float>((1.0 - static_cast<double>(params_.top_p)) * total /
                                       static_cast<double>(vocab) * 0.5);
    cand.clear();
    for (size_t i = 0; i < vocab; ++i) {
      if (weights[i] > 0.0f && weights[i] >= t) {
        cand.push_back(Candidate{logits[i], static_cast<int32_t>(i), weights[i]});
      }
    }
    const size_t keep = SelectNucleus(cand, target);
    return DrawFromCandidates({cand.data(), keep});
  }

  const double kept_mass = min_p > 0.0f ? SumInOrder(weights) : total;
  return WalkInIdOrder(weights, NextUniform() * kept_mass);
}

}  // namespace kvserve
