// Golden parity: stories260K through our tokenizer, paged KV cache and CPU backend must
// reproduce the reference implementation's greedy tokens and first-step top-5 ids exactly.
//
// Probabilities: the README asks for 1e-4. Our F32 engine agrees with an independent
// double-precision dense forward (tests/unit/backend/reference_forward.h) to ~1e-5, but that
// exact computation differs from the reference's published probabilities by up to 1.9e-3
// (logprob up to 6.5e-3), so the reference's own arithmetic is less exact than F32 (emulating
// an F16 attention path gets within 2.3e-3; no variant tried reaches 1e-4). We assert the
// measured bound with a margin, and that the exact computation is what we run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "tests/test_paths.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace golden_test {

constexpr char kModel[] = "models/stories260K.gguf";
constexpr char kGolden[] = "golden/stories260K-greedy.jsonl";
// Measured worst case 1.87e-3 (see the file comment).
constexpr double kProbabilityTolerance = 2.5e-3;

std::vector<nlohmann::json> ReadGolden() {
  std::ifstream in(testing::SharedPath(kGolden));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

int Argmax(std::span<const float> logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<float> first_logits;
};

// Prompt in one batch, then one token per step, as the reference ran.
// `forced`: feed these tokens instead of the greedy ones (teacher forcing), when not empty.
GreedyRun RunGreedy(const Model& model, KvDtype dtype, const std::vector<int32_t>& prompt, int n,
                    ComputeDtype compute = ComputeDtype::kF32, const std::vector<int32_t>& forced = {},
                    std::vector<std::vector<float>>* all_logits = nullptr) {
  const ModelConfig& c = model.config();
  KvSpecConfig sc;
  sc.num_layers = c.num_layers;
  sc.num_kv_heads = c.num_kv_heads;
  sc.head_dim = c.head_dim;
  sc.dtype = dtype;
  KvCacheManager cache(*KvSpec::Create(sc), 64);
  CpuBackendOptions bo;
  bo.limits.max_num_tokens = 512;
  bo.compute_dtype = compute;
  CpuBackend backend(model, bo);
  EXPECT_TRUE(backend.InitKvCache(cache.spec(), 64).ok());
  ModelRunner runner(&backend, &cache, c.vocab_size);
  GreedyRun run;
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> all = prompt;
  int computed = 0;
  for (int step = 0; step < n; ++step) {
    const int count = static_cast<int>(all.size()) - computed;
    EXPECT_TRUE(cache.AllocateSlots(1, count).has_value());
    ScheduledSeq s{1, std::span(all).subspan(computed, count), computed, true};
    Status st = runner.Execute(std::span(&s, 1), logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    computed = static_cast<int>(all.size());
    if (step == 0) run.first_logits = logits;
    if (all_logits != nullptr) all_logits->push_back(logits);
    run.tokens.push_back(Argmax(logits));
    all.push_back(forced.empty() ? run.tokens.back() : forced[step]);
  }
  return run;
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE(kModel);
    REQUIRE_SHARED_FILE(kGolden);
    auto m = Model::Load(testing::SharedPath(kModel));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    golden_ = ReadGolden();
    ASSERT_FALSE(golden_.empty());
  }
  std::unique_ptr<Model> model_;
  std::vector<nlohmann::json> golden_;
};

TEST_F(GoldenTest, PromptTokensMatch) {
  for (const auto& g : golden_) {
    const auto ids = model_->tokenizer().Encode(g["prompt"].get<std::string>(), /*add_special=*/true);
    EXPECT_EQ(ids, g["prompt_tokens"].get<std::vector<int32_t>>()) << g["prompt"];
  }
}

TEST_F(GoldenTest, GreedyTokensAndFirstStepProbabilitiesMatch) {
  for (const auto& g : golden_) {
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const GreedyRun run = RunGreedy(*model_, KvDtype::kF32, prompt, static_cast<int>(want.size()));
    EXPECT_EQ(run.tokens, want) << g["prompt"];
    const auto top = TopLogprobs(run.first_logits, 5);
    const auto& ref = g["top5_first"];
    ASSERT_EQ(top.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(top[i].first, ref[i][0].get<int>()) << g["prompt"] << " rank " << i;
      EXPECT_NEAR(std::exp(top[i].second), ref[i][1].get<double>(), kProbabilityTolerance)
          << g["prompt"] << " rank " << i;
    }
    std::string text;
    for (int32_t id : run.tokens) text += model_->tokenizer().TokenToPiece(id);
    EXPECT_EQ(text, g["text"].get<std::string>());
  }
}

TEST_F(GoldenTest, FirstStepLogitsEqualTheDenseDoublePrecisionForward) {
  for (const auto& g : golden_) {
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const GreedyRun run = RunGreedy(*model_, KvDtype::kF32, prompt, 1);
    const std::vector<float> want = testing::ReferenceLogits(*model_, prompt).back();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(run.first_logits[i], want[i], 1e-4) << g["prompt"];
  }
}

TEST_F(GoldenTest, F16CacheReproducesGreedyTokens) {
  // Half-precision KV changes logits by ~1e-3, far below the goldens' closest margin (0.013).
  int matched = 0, total = 0;
  for (const auto& g : golden_) {
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const GreedyRun run = RunGreedy(*model_, KvDtype::kF16, g["prompt_tokens"].get<std::vector<int32_t>>(),
                                    static_cast<int>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) matched += run.tokens[i] == want[i];
    total += static_cast<int>(want.size());
  }
  EXPECT_EQ(matched, total);
}

TEST_F(GoldenTest, Bf16ComputeReproducesTheGreedyTokensWhereTheirMarginsAllow) {
  // BF16 compute (compute_dtype.h) rounds activations and weights to 8 significant bits: the
  // logits move by up to kShift. Teacher-forced along the goldens, every step whose top-2
  // margin (F32 compute) exceeds 2 * kShift must keep its token; closer steps may flip.
  // Measured: 575 of 576 steps kept, max |d logit| 0.152.
  constexpr double kShift = 0.2;
  int kept = 0, steps = 0, contested = 0;
  double max_shift = 0;
  for (const auto& g : golden_) {
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const int n = static_cast<int>(want.size());
    std::vector<std::vector<float>> f32, bf16;
    RunGreedy(*model_, KvDtype::kF32, prompt, n, ComputeDtype::kF32, want, &f32);
    const GreedyRun run = RunGreedy(*model_, KvDtype::kF32, prompt, n, ComputeDtype::kBF16, want, &bf16);
    for (int i = 0; i < n; ++i) {
      std::vector<float> sorted = f32[i];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const double margin = sorted[0] - sorted[1];
      for (size_t v = 0; v < f32[i].size(); ++v) max_shift = std::max<double>(max_shift, std::abs(f32[i][v] - bf16[i][v]));
      ++steps;
      kept += run.tokens[i] == want[i];
      if (margin > 2 * kShift) {
        EXPECT_EQ(run.tokens[i], want[i]) << g["prompt"] << " step " << i << " margin " << margin;
      } else {
        ++contested;
      }
    }
  }
  std::printf("bf16 compute: %d of %d golden steps kept (%d with a margin below %.2f); max |d logit| %.4f\n", kept,
              steps, contested, 2 * kShift, max_shift);
  EXPECT_LE(max_shift, kShift);
}

}  // namespace golden_test
}  // namespace kvserve
