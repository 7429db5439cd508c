// INT8 KV cache on stories260K: must reproduce >= 95 % of the golden greedy tokens (12 prompts
// x 48 tokens). Counted teacher-forced: at every step the golden prefix is in the cache and the
// INT8 argmax must equal the golden next token (measured: 572 / 576). Free-running generation
// is reported too but not asserted position by position: one flip at a near-tie (the goldens'
// closest calls are 0.013-0.03 apart in logits) sends a story down another, equally valid
// path and every later position then "differs" (measured: 494 / 576, 3 prompts diverge).
// The other dtypes' numbers are in bench/results/kv_quality.md (bench/kv_quality).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"
#include "tests/unit/backend/kv_test_util.h"

namespace kvserve {
namespace {

constexpr char kModel[] = "models/stories260K.gguf";
constexpr char kGolden[] = "golden/stories260K-greedy.jsonl";

// Greedy argmax at each of `want.size()` steps. teacher_forced: the golden token is appended
// after each step (whatever was predicted); otherwise the prediction is.
std::vector<int32_t> Greedy(const Model& model, KvDtype dtype, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& want, bool teacher_forced) {
  testing::KvHarness h(model, testing::SpecFor(model, dtype, 16), {.num_blocks = 16});
  std::vector<int32_t> all = prompt;
  std::vector<int32_t> out;
  int computed = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    const auto logits = h.Run(1, std::span(all).subspan(computed), computed);
    computed = static_cast<int>(all.size());
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    all.push_back(teacher_forced ? want[step] : out.back());
  }
  return out;
}

TEST(KvQuantGolden, Int8KvReproducesAtLeast95PercentOfGoldenTokens) {
  REQUIRE_SHARED_FILE(kModel);
  REQUIRE_SHARED_FILE(kGolden);
  auto model = Model::Load(testing::SharedPath(kModel));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::ifstream in(testing::SharedPath(kGolden));
  int total = 0, same = 0, free_same = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto g = nlohmann::json::parse(line);
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const auto forced = Greedy(**model, KvDtype::kInt8, prompt, want, /*teacher_forced=*/true);
    const auto free = Greedy(**model, KvDtype::kInt8, prompt, want, /*teacher_forced=*/false);
    for (size_t i = 0; i < want.size(); ++i) {
      same += forced[i] == want[i];
      free_same += free[i] == want[i];
    }
    total += static_cast<int>(want.size());
  }
  ASSERT_GT(total, 0);
  const double agreement = static_cast<double>(same) / total;
  RecordProperty("int8_golden_agreement", std::to_string(agreement));
  std::printf("INT8 KV: %d of %d golden tokens teacher-forced (%.1f %%), %d free-running\n", same, total,
              100.0 * agreement, free_same);
  EXPECT_GE(agreement, 0.95);
}

}  // namespace
}  // namespace kvserve
