// INT8, INT4 and INT4C KV caches on stories260K against the golden greedy tokens (12 prompts x 48
// tokens). Counted teacher-forced: at every step the golden prefix is in the cache and the
// quantized run's argmax must equal the golden next token. Free-running generation
// is reported too but not asserted position by position: one flip at a near-tie (the goldens'
// closest calls are 0.013-0.03 apart in logits) sends a story down another, equally valid
// path and every later position then "differs".
// The other dtypes' numbers are in bench/results/kv_quality.md (bench/kv_quality).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"
#include "tests/unit/backend/kv_test_util.h"

namespace kvserve {
namespace kv_quant_golden_test {

constexpr char kModel[] = "models/stories260K.gguf";
constexpr char kGolden[] = "golden/stories260K-greedy.jsonl";

// Greedy argmax at each of `want.size()` steps. teacher_forced: the golden token is appended
// after each step (whatever was predicted); otherwise the prediction is. `log_probs` (optional)
// receives each step's next-token log-probabilities.
std::vector<int32_t> Greedy(const Model& model, KvDtype dtype, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& want, bool teacher_forced,
                            std::vector<std::vector<double>>* log_probs = nullptr) {
  testing::KvHarness h(model, testing::SpecFor(model, dtype, 16), {.num_blocks = 16});
  std::vector<int32_t> all = prompt;
  std::vector<int32_t> out;
  int computed = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    const auto logits = h.Run(1, std::span(all).subspan(computed), computed);
    computed = static_cast<int>(all.size());
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    all.push_back(teacher_forced ? want[step] : out.back());
    if (log_probs != nullptr) {
      const double max = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (float l : logits) sum += std::exp(l - max);
      auto& lp = log_probs->emplace_back(logits.size());
      for (size_t i = 0; i < logits.size(); ++i) lp[i] = logits[i] - max - std::log(sum);
    }
  }
  return out;
}

struct Agreement {
  int total = 0, forced = 0, free = 0;
  double mean_kl = 0;  // teacher-forced KL(F32 KV || dtype), nats
};

Agreement Measure(const Model& model, KvDtype dtype) {
  std::ifstream in(testing::SharedPath(kGolden));
  Agreement a;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto g = nlohmann::json::parse(line);
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    std::vector<std::vector<double>> lp, lp_f32;
    const auto forced = Greedy(model, dtype, prompt, want, /*teacher_forced=*/true, &lp);
    Greedy(model, KvDtype::kF32, prompt, want, /*teacher_forced=*/true, &lp_f32);
    const auto free = Greedy(model, dtype, prompt, want, /*teacher_forced=*/false);
    for (size_t i = 0; i < want.size(); ++i) {
      a.forced += forced[i] == want[i];
      a.free += free[i] == want[i];
      for (size_t v = 0; v < lp[i].size(); ++v) a.mean_kl += std::exp(lp_f32[i][v]) * (lp_f32[i][v] - lp[i][v]);
    }
    a.total += static_cast<int>(want.size());
  }
  a.mean_kl /= std::max(a.total, 1);
  std::printf("%s KV: %d of %d golden tokens teacher-forced (%.1f %%, mean KL vs F32 KV %.2e), %d free-running\n",
              std::string(KvDtypeName(dtype)).c_str(), a.forced, a.total, 100.0 * a.forced / a.total, a.mean_kl,
              a.free);
  return a;
}

// Issue 16's goals, teacher-forced on the goldens: INT8 top-1 >= 99.8 % (measured 575 / 576)
// and INT4C (keys per channel, filling block in F16) top-1 >= 97 % with mean KL <= 0.01
// (measured 97.9 %, 2.5e-3). INT4 with per-token groups stays at its measured floor (80.6 %):
// the floor guards against regressions.
TEST(KvQuantGolden, QuantizedKvReproducesTheGoldenTokens) {
  REQUIRE_SHARED_FILE(kModel);
  REQUIRE_SHARED_FILE(kGolden);
  auto model = Model::Load(testing::SharedPath(kModel));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  struct Goal {
    KvDtype dtype;
    double top1, kl;
  };
  for (const Goal& goal : {Goal{KvDtype::kInt8, 0.998, 1e-3}, Goal{KvDtype::kInt4C, 0.97, 0.01},
                           Goal{KvDtype::kInt4, 0.80, 0.25}}) {
    const Agreement a = Measure(**model, goal.dtype);
    ASSERT_GT(a.total, 0);
    EXPECT_GE(static_cast<double>(a.forced) / a.total, goal.top1) << KvDtypeName(goal.dtype);
    EXPECT_LE(a.mean_kl, goal.kl) << KvDtypeName(goal.dtype);
  }
}

}  // namespace kv_quant_golden_test
}  // namespace kvserve
