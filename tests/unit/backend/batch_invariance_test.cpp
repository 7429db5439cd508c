// Batch invariance: a sequence's logits (hence its tokens and log-probabilities) are the same
// bits whether it runs alone or inside forward passes with 1, 6 or 15 other sequences (some
// prefilling in chunks, some decoding), in every compute mode (compute_dtype.h), on two
// threads so the work is split differently every time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/backend/kv_test_util.h"

namespace kvserve {
namespace batch_invariance_test {

struct Param {
  const char* model;
  ComputeDtype compute;
  KvDtype kv = KvDtype::kF32;  // int4c: staged keys, encoded when a block fills
};

class BatchInvarianceTest : public ::testing::TestWithParam<Param> {};

// The target's logits at each of its steps (its prompt, then `decode_steps` greedy tokens),
// with `companions` other sequences in every pass.
std::vector<std::vector<float>> RunTarget(const Model& model, ComputeDtype compute, int companions,
                                          KvDtype kv = KvDtype::kF32) {
  const int vocab = model.config().vocab_size;
  KvCacheManager cache(testing::SpecFor(model, kv, 16), 256);
  CpuBackendOptions bo;
  bo.limits.max_num_tokens = 256;
  bo.limits.max_num_seqs = 32;
  bo.limits.max_logits = 32;
  bo.num_threads = 2;
  bo.compute_dtype = compute;
  CpuBackend backend(model, bo);
  EXPECT_TRUE(backend.InitKvCache(cache.spec(), 256).ok());
  ModelRunner runner(&backend, &cache, vocab);

  struct Seq {
    SeqId id;
    std::vector<int32_t> tokens;  // prompt, then generated
    int computed = 0;
    int prompt_len = 0;
  };
  std::vector<Seq> seqs;
  const int target = companions / 2;  // somewhere in the middle of the batch
  for (int i = 0; i <= companions; ++i) {
    const bool is_target = i == target;
    const int len = is_target ? 37 : 5 + (13 * i) % 50;
    seqs.push_back({static_cast<SeqId>(i + 1), testing::RandomTokens(len, vocab, is_target ? 1000 : 1 + i), 0, len});
  }
  constexpr int kChunk = 8;  // companions prefill in chunks; the target's prompt is one pass
  constexpr int kDecodeSteps = 10;
  std::vector<std::vector<float>> out;
  std::vector<float> logits(static_cast<size_t>(seqs.size()) * vocab);
  for (int step = 0; step <= kDecodeSteps; ++step) {
    std::vector<ScheduledSeq> work;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      const int remaining = static_cast<int>(s.tokens.size()) - s.computed;
      const int n = static_cast<int>(i) == target ? remaining : std::min(remaining, kChunk);
      EXPECT_TRUE(cache.AllocateSlots(s.id, n).has_value());
      work.push_back({s.id, std::span(s.tokens).subspan(s.computed, n), s.computed, 1});
    }
    EXPECT_TRUE(runner.Execute(work, logits).ok());
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      s.computed += static_cast<int>(work[i].tokens.size());
      const float* row = logits.data() + i * vocab;
      if (static_cast<int>(i) == target) out.emplace_back(row, row + vocab);
      // Everyone decodes greedily once its prompt is in.
      if (s.computed == static_cast<int>(s.tokens.size())) {
        s.tokens.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
      }
    }
  }
  return out;
}

TEST_P(BatchInvarianceTest, LogitsAreTheSameBitsAloneAndInBatchesOf2_7And16) {
  const std::unique_ptr<Model> model = testing::LoadModelOrDie(GetParam().model);
  const std::vector<std::vector<float>> alone = RunTarget(*model, GetParam().compute, 0, GetParam().kv);
  for (int companions : {1, 6, 15}) {
    const std::vector<std::vector<float>> batched = RunTarget(*model, GetParam().compute, companions, GetParam().kv);
    ASSERT_EQ(batched.size(), alone.size());
    for (size_t step = 0; step < alone.size(); ++step) {
      ASSERT_EQ(0, std::memcmp(batched[step].data(), alone[step].data(), alone[step].size() * sizeof(float)))
          << "batch of " << companions + 1 << ", step " << step;
    }
  }
}

TEST(BatchInvarianceModesTest, Bf16ComputeChangesTheLogitsOnlyByRounding) {
  // The two modes run different arithmetic (so the test above covers both), close to each other.
  const std::unique_ptr<Model> model = testing::LoadModelOrDie("synthetic:tiny");
  const std::vector<std::vector<float>> f32 = RunTarget(*model, ComputeDtype::kF32, 0);
  const std::vector<std::vector<float>> bf16 = RunTarget(*model, ComputeDtype::kBF16, 0);
  // Step 0 only: later steps may follow different greedy tokens.
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < f32[0].size(); ++i) {
    max_diff = std::max<double>(max_diff, std::abs(f32[0][i] - bf16[0][i]));
    max_abs = std::max<double>(max_abs, std::abs(f32[0][i]));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 0.05 * max_abs);
}

INSTANTIATE_TEST_SUITE_P(
    Models, BatchInvarianceTest,
    ::testing::Values(Param{"synthetic:tiny", ComputeDtype::kF32}, Param{"synthetic:tiny", ComputeDtype::kBF16},
                      Param{"synthetic:gemma2-tiny", ComputeDtype::kF32},
                      Param{"synthetic:gemma2-tiny", ComputeDtype::kBF16},
                      Param{"synthetic:tiny", ComputeDtype::kF32, KvDtype::kInt4C},
                      Param{"synthetic:tiny", ComputeDtype::kF32, KvDtype::kInt8},
                      Param{"synthetic:tiny:q4_0", ComputeDtype::kInt8}, Param{"synthetic:tiny:q8_0", ComputeDtype::kInt8}),
    [](const auto& info) {
      std::string name = std::string(info.param.model).substr(10) + "_" +
                         std::string(ComputeDtypeName(info.param.compute));
      if (info.param.kv != KvDtype::kF32) name += "_kv_" + std::string(KvDtypeName(info.param.kv));
      std::replace(name.begin(), name.end(), '-', '_');
      std::replace(name.begin(), name.end(), ':', '_');
      return name;
    });

}  // namespace batch_invariance_test
}  // namespace kvserve
