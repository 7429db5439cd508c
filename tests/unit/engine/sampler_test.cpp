// Tests for Sampler and TopLogprobs (SamplingParams::Validate: sampling_params_test.cpp):
// exact token choices for the deterministic paths, hand-computed penalty/logprob values, and
// draw frequencies within +-3 standard deviations (binomial) for the random paths. Every test
// uses a fixed seed, so each outcome is deterministic; the tolerance only documents what a
// correct sampler must meet.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve {
namespace sampler_test {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

Sampler MakeSampler(const SamplingParams& params, int vocab, uint64_t default_seed = 1,
                    std::vector<int32_t> eos = {}) {
  return Sampler(params, vocab, default_seed, std::move(eos));
}

// Sample() overwrites its input, so each call gets a fresh copy.
int32_t SampleId(Sampler& sampler, std::vector<float> logits) {
  return sampler.Sample(logits).id;
}

// Deterministic pseudo-random logits in [-4, 4) (raw bits, no distribution objects).
std::vector<float> RandomLogits(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = static_cast<float>((rng() >> 40) * 0x1.0p-24 * 8.0 - 4.0);
  return logits;
}

int32_t ArgmaxOf(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

std::vector<float> LogProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws `draws` tokens (without Accept, so no state changes) and counts each id.
std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(SampleId(sampler, logits))];
  return counts;
}

// Each count within 3 binomial standard deviations of draws * expected[i].
void ExpectFrequencies(const std::vector<int>& counts, const std::vector<double>& expected,
                       int draws) {
  ASSERT_EQ(counts.size(), expected.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    const double mean = draws * expected[i];
    const double sd = std::sqrt(draws * expected[i] * (1.0 - expected[i]));
    EXPECT_NEAR(counts[i], mean, 3.0 * sd) << "token " << i << " expected p=" << expected[i];
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i;
    }
  }
}

// ---- Greedy, bias, penalties ----------------------------------------------------------

TEST(SamplerTest, GreedyPicksArgmax) {
  Sampler sampler = MakeSampler(Greedy(), 4);
  EXPECT_EQ(SampleId(sampler, {0.1f, 2.5f, -1.0f, 2.4f}), 1);
  EXPECT_EQ(SampleId(sampler, {-3.0f, -2.0f, -1.0f, -1.5f}), 2);
}

TEST(SamplerTest, GreedyTiesPickLowestId) {
  Sampler sampler = MakeSampler(Greedy(), 5);
  EXPECT_EQ(SampleId(sampler, {1.0f, 3.0f, 0.0f, 3.0f, 3.0f}), 1);
}

TEST(SamplerTest, TinyTemperatureIsGreedy) {
  SamplingParams params;
  params.temperature = 1e-6f;
  Sampler sampler = MakeSampler(params, 1000);
  const std::vector<float> logits = RandomLogits(1000, 3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleId(sampler, logits), ArgmaxOf(logits));
}

TEST(SamplerTest, NanLogitsNeverWin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Sampler greedy = MakeSampler(Greedy(), 3);
  EXPECT_EQ(SampleId(greedy, {nan, 1.0f, nan}), 1);
  Sampler random = MakeSampler(SamplingParams{}, 3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleId(random, {nan, 1.0f, nan}), 1);
}

TEST(SamplerTest, LogitBiasFlipsArgmax) {
  SamplingParams params = Greedy();
  params.logit_bias = {{0, 1.5f}};  // 1.0 + 1.5 = 2.5 > 2.0
  Sampler up = MakeSampler(params, 3);
  EXPECT_EQ(SampleId(up, {1.0f, 2.0f, 0.5f}), 0);

  params.logit_bias = {{1, -100.0f}};  // bans the argmax
  Sampler down = MakeSampler(params, 3);
  EXPECT_EQ(SampleId(down, {1.0f, 2.0f, 0.5f}), 0);
  std::vector<float> logits = {1.0f, 2.0f, 0.5f};
  down.ProcessLogits(logits);
  EXPECT_FLOAT_EQ(logits[1], -98.0f);
}

TEST(SamplerTest, RepetitionPenaltyOverPromptAndGeneratedByHand) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 1.2f;
  Sampler sampler = MakeSampler(params, 4);
  const std::vector<float> raw = {2.0f, 1.8f, -1.0f, 0.5f};
  EXPECT_EQ(SampleId(sampler, raw), 0);  // nothing seen yet

  const std::vector<int32_t> prompt = {0, 2, 0};
  sampler.AddPromptTokens(prompt);
  std::vector<float> logits = raw;
  sampler.ProcessLogits(logits);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 1.2f);   // positive: divided -> 1.6667 < 1.8
  EXPECT_FLOAT_EQ(logits[1], 1.8f);          // unseen
  EXPECT_FLOAT_EQ(logits[2], -1.0f * 1.2f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[3], 0.5f);
  EXPECT_EQ(SampleId(sampler, raw), 1);  // the penalty moved the choice from 0 to 1

  sampler.Accept(1);  // generated tokens count too (once, regardless of how often)
  sampler.Accept(1);
  logits = raw;
  sampler.ProcessLogits(logits);
  EXPECT_FLOAT_EQ(logits[1], 1.8f / 1.2f);  // 1.5 < 1.6667
  EXPECT_EQ(SampleId(sampler, raw), 0);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesByHand) {
  SamplingParams params = Greedy();
  params.presence_penalty = 0.3f;
  params.frequency_penalty = 0.4f;
  Sampler sampler = MakeSampler(params, 3);
  const std::vector<int32_t> prompt = {2, 2, 2};  // the prompt does not count (OpenAI)
  sampler.AddPromptTokens(prompt);
  const std::vector<float> raw = {3.0f, 2.5f, 2.0f};
  EXPECT_EQ(SampleId(sampler, raw), 0);

  sampler.Accept(0);
  sampler.Accept(0);
  sampler.Accept(1);
  std::vector<float> logits = raw;
  sampler.ProcessLogits(logits);
  EXPECT_FLOAT_EQ(logits[0], 3.0f - 2 * 0.4f - 0.3f);  // 1.9
  EXPECT_FLOAT_EQ(logits[1], 2.5f - 1 * 0.4f - 0.3f);  // 1.8
  EXPECT_FLOAT_EQ(logits[2], 2.0f);
  EXPECT_EQ(SampleId(sampler, raw), 2);
}

TEST(SamplerTest, NegativePresencePenaltyEncouragesRepeats) {
  SamplingParams params = Greedy();
  params.presence_penalty = -1.0f;
  Sampler sampler = MakeSampler(params, 3);
  sampler.Accept(2);
  EXPECT_EQ(SampleId(sampler, {3.0f, 2.5f, 2.5f}), 2);  // 2.5 + 1.0 = 3.5
}

TEST(SamplerTest, MinTokensMasksEosAndStopTokenIds) {
  SamplingParams params = Greedy();
  params.min_tokens = 2;
  params.stop_token_ids = {2};
  Sampler sampler = MakeSampler(params, 4, 1, /*eos=*/{3});
  const std::vector<float> raw = {0.0f, 1.0f, 5.0f, 9.0f};
  EXPECT_FALSE(sampler.eos_allowed());
  EXPECT_EQ(SampleId(sampler, raw), 1);
  sampler.Accept(1);
  EXPECT_EQ(SampleId(sampler, raw), 1);
  sampler.Accept(1);
  EXPECT_TRUE(sampler.eos_allowed());
  EXPECT_EQ(SampleId(sampler, raw), 3);
  EXPECT_EQ(sampler.num_generated(), 2);
  EXPECT_TRUE(sampler.IsStopToken(3));
  EXPECT_TRUE(sampler.IsStopToken(2));
  EXPECT_FALSE(sampler.IsStopToken(1));
}

TEST(SamplerTest, IgnoreEosMasksEosButNotStopTokenIds) {
  SamplingParams params = Greedy();
  params.ignore_eos = true;
  params.stop_token_ids = {2};
  Sampler sampler = MakeSampler(params, 4, 1, /*eos=*/{3});
  EXPECT_EQ(SampleId(sampler, {0.0f, 1.0f, 5.0f, 9.0f}), 2);
  EXPECT_FALSE(sampler.IsStopToken(3));
  EXPECT_TRUE(sampler.IsStopToken(2));

  SamplingParams random;
  random.ignore_eos = true;
  Sampler sampler2 = MakeSampler(random, 2, 1, /*eos=*/{1});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleId(sampler2, {0.0f, 5.0f}), 0);
}

// ---- Filters ------------------------------------------------------------------------------

TEST(SamplerTest, TopK1IsGreedyForAnyTemperature) {
  for (float temperature : {0.3f, 1.0f, 2.0f, 50.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 1;
    Sampler sampler = MakeSampler(params, 1000, 11);
    const std::vector<float> logits = RandomLogits(1000, 5);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleId(sampler, logits), ArgmaxOf(logits));
    Sampler ties = MakeSampler(params, 4, 11);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleId(ties, {1.0f, 4.0f, 4.0f, 2.0f}), 1);
  }
}

TEST(SamplerTest, SmallTopPIsGreedy) {
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_p = 1e-6f;
  Sampler sampler = MakeSampler(params, 1000, 12);
  const std::vector<float> logits = RandomLogits(1000, 6);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleId(sampler, logits), ArgmaxOf(logits));
  Sampler ties = MakeSampler(params, 3, 12);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleId(ties, {1.0f, 5.0f, 5.0f}), 1);
}

// The 4-token distribution p = (0.1, 0.2, 0.3, 0.4) over 20000 draws; each count must lie
// within 3 binomial standard deviations (e.g. token 0: 2000 +- 127; token 3: 8000 +- 208).
constexpr int kDraws = 20000;
const std::vector<double> kProbs = {0.1, 0.2, 0.3, 0.4};

TEST(SamplerTest, FrequenciesMatchTheDistribution) {
  SamplingParams params;
  params.seed = 2024;
  Sampler sampler = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(sampler, LogProbs(kProbs), kDraws), kProbs, kDraws);
}

TEST(SamplerTest, TemperatureReshapesTheDistribution) {
  SamplingParams params;
  params.seed = 7;
  params.temperature = 0.5f;  // p^(1/T) = p^2, renormalised: (1, 4, 9, 16) / 30
  Sampler sampler = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(sampler, LogProbs(kProbs), kDraws), {1 / 30.0, 4 / 30.0,
                    9 / 30.0, 16 / 30.0}, kDraws);
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams params;
  params.seed = 8;
  params.top_k = 2;  // (0.3, 0.4) renormalised
  Sampler sampler = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(sampler, LogProbs(kProbs), kDraws), {0, 0, 3 / 7.0, 4 / 7.0},
                    kDraws);
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  SamplingParams params;
  params.seed = 9;
  params.top_p = 0.5f;  // 0.4 < 0.5 so 0.3 is kept too; 0.7 >= 0.5 stops
  Sampler half = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(half, LogProbs(kProbs), kDraws), {0, 0, 3 / 7.0, 4 / 7.0},
                    kDraws);
  params.top_p = 0.75f;  // 0.7 < 0.75 keeps 0.2 as well
  Sampler three = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(three, LogProbs(kProbs), kDraws), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0},
                    kDraws);
}

TEST(SamplerTest, TopPMassIsMeasuredAfterTopK) {
  SamplingParams params;
  params.seed = 10;
  params.top_k = 3;     // (0.2, 0.3, 0.4) / 0.9
  params.top_p = 0.5f;  // 0.4/0.9 = 0.444 < 0.5 so 0.3 is kept; 0.778 stops
  Sampler sampler = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(sampler, LogProbs(kProbs), kDraws), {0, 0, 3 / 7.0, 4 / 7.0},
                    kDraws);
}

TEST(SamplerTest, MinPFilters) {
  SamplingParams params;
  params.seed = 11;
  params.min_p = 0.35f;  // keeps p >= 0.35 * 0.5 = 0.175
  Sampler sampler = MakeSampler(params, 4);
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  ExpectFrequencies(Histogram(sampler, LogProbs(probs), kDraws), {0.625, 0.375, 0, 0}, kDraws);
}

TEST(SamplerTest, MinPCombinesWithTopKAndTopP) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  SamplingParams params;
  params.seed = 16;
  params.min_p = 0.35f;
  params.top_p = 0.99f;  // would keep all four; min_p is the binding filter
  Sampler with_top_p = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(with_top_p, LogProbs(probs), kDraws), {0.625, 0.375, 0, 0},
                    kDraws);
  params.top_p = 1.0f;
  params.top_k = 3;
  Sampler with_top_k = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(with_top_k, LogProbs(probs), kDraws), {0.625, 0.375, 0, 0},
                    kDraws);
  params.top_p = 0.6f;  // now top_p binds first: 0.5 < 0.6 keeps 0.3, 0.8 stops
  params.min_p = 0.05f;
  Sampler top_p_binds = MakeSampler(params, 4);
  ExpectFrequencies(Histogram(top_p_binds, LogProbs(probs), kDraws), {0.625, 0.375, 0, 0},
                    kDraws);
}

// top_p against a brute-force nucleus (full sort in double) on a vocabulary large enough for
// the selection to partition rather than sort.
TEST(SamplerTest, TopPNucleusMatchesBruteForce) {
  constexpr int kVocab = 5000;
  const std::vector<float> logits = RandomLogits(kVocab, 17);
  std::vector<int32_t> order(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)];
    const float lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  for (float top_p : {0.05f, 0.3f, 0.8f}) {
    size_t nucleus = 0;
    double mass_before = 0.0;
    while (nucleus < order.size() && mass_before < top_p) {
      mass_before += std::exp(static_cast<double>(logits[static_cast<size_t>(order[nucleus])])) / z;
      ++nucleus;
    }
    std::vector<int> rank(kVocab);
    for (size_t r = 0; r < order.size(); ++r) rank[static_cast<size_t>(order[r])] = static_cast<int>(r);

    SamplingParams params;
    params.seed = 18;
    params.top_p = top_p;
    Sampler sampler = MakeSampler(params, kVocab);
    int max_rank = -1;
    for (int i = 0; i < 3000; ++i) {
      const int r = rank[static_cast<size_t>(SampleId(sampler, logits))];
      ASSERT_LT(r, static_cast<int>(nucleus)) << "top_p=" << top_p << " nucleus=" << nucleus;
      max_rank = std::max(max_rank, r);
    }
    // The draws reach the tail of the nucleus (its last tokens each have p ~ 1/nucleus).
    EXPECT_GE(max_rank, static_cast<int>(nucleus * 8 / 10)) << "top_p=" << top_p;
  }
}

TEST(SamplerTest, FiltersOnALargeVocabulary) {
  constexpr int kVocab = 150000;
  const std::vector<float> flat(kVocab, 0.25f);  // all tied: canonical order is by id
  struct Case {
    int top_k;
    float top_p;
    float min_p;
    int32_t bound;  // every sampled id must be < bound
  };
  for (const Case& c : {Case{100, 1.0f, 0.0f, 100}, Case{10000, 1.0f, 0.0f, 10000},
                        Case{0, 0.5f, 0.0f, 75000}, Case{20000, 0.25f, 0.0f, 5000}}) {
    SamplingParams params;
    params.seed = 12;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    Sampler sampler = MakeSampler(params, kVocab);
    SamplerScratch scratch;
    int32_t max_seen = -1;
    for (int i = 0; i < 100; ++i) {
      std::vector<float> logits = flat;
      const int32_t id = sampler.Sample(logits, scratch).id;
      ASSERT_GE(id, 0);
      ASSERT_LT(id, c.bound) << "top_k=" << c.top_k << " top_p=" << c.top_p;
      max_seen = std::max(max_seen, id);
    }
    EXPECT_GT(max_seen, c.bound / 2) << "draws should spread over the kept set";
  }

  // Random logits: top_k = 40 keeps exactly the 40 largest; min_p keeps those near the max.
  const std::vector<float> logits = RandomLogits(kVocab, 13);
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  SamplingParams params;
  params.seed = 14;
  params.top_k = 40;
  params.top_p = 0.9f;
  Sampler top_k = MakeSampler(params, kVocab);
  for (int i = 0; i < 100; ++i) {
    ASSERT_GE(logits[static_cast<size_t>(SampleId(top_k, logits))], sorted[39]);
  }
  params = SamplingParams{};
  params.seed = 15;
  params.min_p = 0.5f;  // keeps logit >= max + log(0.5)
  Sampler min_p = MakeSampler(params, kVocab);
  for (int i = 0; i < 100; ++i) {
    ASSERT_GE(logits[static_cast<size_t>(SampleId(min_p, logits))],
              sorted[0] + std::log(0.5f) - 1e-6f);
  }
}

// ---- Seeds --------------------------------------------------------------------------------

std::vector<int32_t> Generate(const SamplingParams& params, uint64_t default_seed, int steps) {
  constexpr int kVocab = 1000;
  Sampler sampler = MakeSampler(params, kVocab, default_seed);
  std::vector<int32_t> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> logits = RandomLogits(kVocab, 100 + static_cast<uint64_t>(step % 7));
    const int32_t id = sampler.Sample(logits).id;
    sampler.Accept(id);
    out.push_back(id);
  }
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 200;
  params.top_p = 0.95f;
  params.frequency_penalty = 0.1f;
  params.seed = 42;
  const std::vector<int32_t> a = Generate(params, 1, 200);
  const std::vector<int32_t> b = Generate(params, 2, 200);  // default seed unused
  EXPECT_EQ(a, b);
  params.seed = 43;
  const std::vector<int32_t> c = Generate(params, 1, 200);
  EXPECT_NE(a, c);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 50) << "different seeds should give mostly different tokens";
}

TEST(SamplerTest, DefaultSeedUsedWithoutParamsSeed) {
  SamplingParams params;
  EXPECT_EQ(Generate(params, 7, 200), Generate(params, 7, 200));
  EXPECT_NE(Generate(params, 7, 200), Generate(params, 8, 200));
  EXPECT_EQ(MakeSampler(params, 10, 7).seed(), 7u);
  params.seed = 5;
  EXPECT_EQ(MakeSampler(params, 10, 7).seed(), 5u);
}

// ---- Logprobs -----------------------------------------------------------------------------

TEST(SamplerTopLogprobsTest, HandComputed) {
  // log Z = log(e^1 + e^2 + e^3 + e^0.5) = 3.460773489156851
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  const auto top = TopLogprobs(logits, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].first, 2);
  EXPECT_NEAR(top[0].second, -0.4607734891568511, 1e-6);
  EXPECT_EQ(top[1].first, 1);
  EXPECT_NEAR(top[1].second, -1.4607734891568511, 1e-6);

  const auto all = TopLogprobs(logits, 10);  // clamped to the vocabulary
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].first, 0);
  EXPECT_NEAR(all[2].second, -2.460773489156851, 1e-6);
  EXPECT_EQ(all[3].first, 3);
  EXPECT_NEAR(all[3].second, -2.960773489156851, 1e-6);
  EXPECT_TRUE(TopLogprobs(logits, 0).empty());
}

TEST(SamplerTopLogprobsTest, TiesByLowerId) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, -2.0f};
  const auto top = TopLogprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 2);
  EXPECT_EQ(top[2].first, 0);
  EXPECT_NEAR(top[0].second, -0.8828028227218383, 1e-6);
  EXPECT_NEAR(top[1].second, -0.8828028227218383, 1e-6);
  EXPECT_NEAR(top[2].second, -1.8828028227218383, 1e-6);
}

TEST(SamplerTopLogprobsTest, LargeVocabularyAgreesWithDirectComputation) {
  const std::vector<float> logits = RandomLogits(150000, 21);
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  const auto top = TopLogprobs(logits, 20);
  ASSERT_EQ(top.size(), 20u);
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(logits[static_cast<size_t>(top[i].first)], sorted[i]);
    EXPECT_NEAR(top[i].second, sorted[i] - std::log(z), 1e-5);
  }
}

TEST(SamplerTest, ReportsRawLogprobsNotProcessedOnes) {
  SamplingParams params = Greedy();
  params.logprobs = 2;
  params.logit_bias = {{0, 10.0f}};  // forces token 0; logprobs stay those of the raw logits
  Sampler sampler = MakeSampler(params, 4);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  const SampledToken token = sampler.Sample(logits);
  EXPECT_EQ(token.id, 0);
  EXPECT_NEAR(token.logprob, -2.460773489156851, 1e-6);
  ASSERT_EQ(token.top_logprobs.size(), 2u);
  EXPECT_EQ(token.top_logprobs[0].first, 2);
  EXPECT_NEAR(token.top_logprobs[0].second, -0.4607734891568511, 1e-6);
  EXPECT_EQ(token.top_logprobs[1].first, 1);

  params.logprobs = 0;  // chosen token's logprob only
  Sampler chosen_only = MakeSampler(params, 4);
  logits = {1.0f, 2.0f, 3.0f, 0.5f};
  const SampledToken only = chosen_only.Sample(logits);
  EXPECT_NEAR(only.logprob, -2.460773489156851, 1e-6);
  EXPECT_TRUE(only.top_logprobs.empty());
}

TEST(SamplerTest, NoLogprobsWhenOff) {
  Sampler sampler = MakeSampler(Greedy(), 4);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  const SampledToken token = sampler.Sample(logits);
  EXPECT_EQ(token.id, 2);
  EXPECT_EQ(token.logprob, 0.0f);
  EXPECT_TRUE(token.top_logprobs.empty());
}

TEST(SamplerTest, EverythingMaskedFallsBackToZero) {
  SamplingParams params;
  params.min_tokens = 1;
  Sampler sampler = MakeSampler(params, 2, 1, /*eos=*/{1});
  EXPECT_EQ(SampleId(sampler, {kNegInf, 5.0f}), 0);
}

}  // namespace sampler_test
}  // namespace kvserve
