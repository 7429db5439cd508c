// kv-sensitivity: teacher-forced logits agree with the dense reference, per-layer errors are
// sorted worst first, and keeping the recommended layers at F16 reduces the error.
#include "tools/kv_sensitivity/kv_sensitivity.h"

#include <gtest/gtest.h>

#include "tests/test_paths.h"
#include "tests/unit/backend/kv_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace kv_sensitivity_test {

TEST(KvSensitivity, TeacherForcedLogitsMatchTheReference) {
  auto model = testing::LoadModelOrDie("synthetic:tiny:f32");
  const auto tokens = testing::RandomTokens(150, model->config().vocab_size, 21);  // two chunks
  KvSpecConfig kv;
  kv.dtype = KvDtype::kF32;
  auto logits = TeacherForcedLogits(*model, kv, tokens);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const auto ref = testing::ReferenceLogits(*model, tokens);
  const int V = model->config().vocab_size;
  for (int t : {0, 77, 127, 128, 149}) {
    EXPECT_LE(testing::MaxAbsDiff(std::span(*logits).subspan(static_cast<size_t>(t) * V, V), ref[t]), 1e-4f) << t;
  }
  const KvErrorStats same = CompareLogits(*logits, *logits, V);
  EXPECT_EQ(same.mean_kl, 0.0);
  EXPECT_EQ(same.max_abs_logit_error, 0.0);
  EXPECT_EQ(same.top1_agreement, 1.0);
}

TEST(KvSensitivity, SortsLayersAndRecommendsTheWorst) {
  auto model = testing::LoadModelOrDie("synthetic:tiny:f32");
  auto report = MeasureKvSensitivity(*model, KvDtype::kInt4C, "", 200);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->layers.size(), 2u);
  EXPECT_GE(report->layers[0].error.mean_kl, report->layers[1].error.mean_kl);
  EXPECT_GT(report->num_tokens, 100);
  EXPECT_GT(report->all_layers.mean_kl, 0.0);
  ASSERT_EQ(report->recommended_keep, std::vector<int>{report->layers[0].layer});
  EXPECT_LT(report->with_recommendation.mean_kl, report->all_layers.mean_kl);
  EXPECT_EQ(report->recommended_flag, "--kv-dtype int4c --kv-keep layers=" + std::to_string(report->layers[0].layer));
  const std::string text = FormatKvSensitivityReport(*report);
  EXPECT_NE(text.find("recommended: --kv-dtype int4c"), std::string::npos) << text;
}

TEST(KvSensitivity, RejectsTooLittleText) {
  auto model = testing::LoadModelOrDie("synthetic:tiny:f32");
  EXPECT_EQ(MeasureKvSensitivity(*model, KvDtype::kInt8, "hi", 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureKvSensitivity(*model, KvDtype::kInt8, "", 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvSensitivity, RunsOnStories260K) {
  REQUIRE_SHARED_FILE("models/stories260K.gguf");
  auto model = Model::Load(testing::SharedPath("models/stories260K.gguf"));
  ASSERT_TRUE(model.ok());
  auto report = MeasureKvSensitivity(**model, KvDtype::kInt4, "", 256);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->layers.size(), 5u);
  EXPECT_EQ(report->num_tokens, 256);
  EXPECT_FALSE(report->recommended_keep.empty());
  EXPECT_LE(report->recommended_keep.size(), 1u);  // at most a quarter of 5 layers
  std::printf("%s", FormatKvSensitivityReport(*report).c_str());
}

}  // namespace kv_sensitivity_test
}  // namespace kvserve
