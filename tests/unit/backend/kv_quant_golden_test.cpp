// INT8 and INT4 KV caches on stories260K against the golden greedy tokens (12 prompts x 48
// tokens). Counted teacher-forced: at every step the golden prefix is in the cache and the
// quantized run's argmax must equal the golden next token. Free-running generation
// is reported too but not asserted position by position: one flip at a near-tie (the goldens'
// closest calls are 0.013-0.03 apart in logits) sends a story down another, equally valid
// path and every later position then "differs".
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

struct Agreement {
  int total = 0, forced = 0, free = 0;
};

Agreement Measure(const Model& model, KvDtype dtype) {
  std::ifstream in(testing::SharedPath(kGolden));
  Agreement a;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto g = nlohmann::json::parse(line);
    const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const auto forced = Greedy(model, dtype, prompt, want, /*teacher_forced=*/true);
    const auto free = Greedy(model, dtype, prompt, want, /*teacher_forced=*/false);
    for (size_t i = 0; i < want.size(); ++i) {
      a.forced += forced[i] == want[i];
      a.free += free[i] == want[i];
    }
    a.total += static_cast<int>(want.size());
  }
  std::printf("%s KV: %d of %d golden tokens teacher-forced (%.1f %%), %d free-running\n",
              std::string(KvDtypeName(dtype)).c_str(), a.forced, a.total, 100.0 * a.forced / a.total, a.free);
  return a;
}

// INT8 meets issue 16's goal (>= 99.8 % teacher-forced; measured 575 / 576). INT4 does not yet
// (goal 97 %, measured 80.6 % with asymmetric per-token groups): its floor guards against
// regressions until per-channel key blocks land.
TEST(KvQuantGolden, QuantizedKvReproducesTheGoldenTokens) {
  REQUIRE_SHARED_FILE(kModel);
  REQUIRE_SHARED_FILE(kGolden);
  auto model = Model::Load(testing::SharedPath(kModel));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (const auto& [dtype, floor] : {std::pair{KvDtype::kInt8, 0.998}, std::pair{KvDtype::kInt4, 0.80}}) {
    const Agreement a = Measure(**model, dtype);
    ASSERT_GT(a.total, 0);
    EXPECT_GE(static_cast<double>(a.forced) / a.total, floor) << KvDtypeName(dtype);
  }
}

}  // namespace
}  // namespace kvserve
