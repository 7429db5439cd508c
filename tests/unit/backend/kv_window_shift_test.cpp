// Backend::ShiftKeys and sliding-window eviction against the model:
//  * after ShiftKeys(delta), every K row equals the K row written fresh at position p + delta
//    (F32 exactly up to float rounding; F16/BF16/INT8/INT4 within one re-encoding), V untouched;
//  * after a window eviction + ShiftKeys, the next-token logits equal a fresh prefill of the
//    kept tokens at re-indexed positions (<= 1e-4) on a ONE-layer model, where K/V depend
//    only on token and position so the property is exact.
#include <gtest/gtest.h>

#include <cmath>

#include "cache/kv_codec.h"
#include "common/fp16.h"
#include "engine/model/gguf.h"
#include "engine/model/synthetic.h"
#include "tests/unit/backend/kv_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace kv_window_shift_test {

using testing::KvHarness;
using testing::LoadModelOrDie;
using testing::RandomTokens;
using testing::SpecFor;

// "synthetic:tiny:f32" with one layer and linear RoPE scaling (factor 4 -> freq scale 0.25).
std::unique_ptr<Model> ScaledRopeModel() {
  ModelLoadOptions o;
  o.seed = 7;
  o.num_layers_override = 1;
  auto opts = ParseSyntheticSpec("synthetic:tiny:f32", o);
  CHECK(opts.ok());
  auto writer = MakeSyntheticGguf(*opts);
  CHECK(writer.ok());
  writer->AddString("llama.rope.scaling.type", "linear");
  writer->AddFloat32("llama.rope.scaling.factor", 4.0f);
  auto file = GgufFile::FromBytes(writer->Serialize());
  CHECK(file.ok()) << file.status().ToString();
  auto model = Model::FromGguf(std::move(file).value(), o);
  CHECK(model.ok()) << model.status().ToString();
  CHECK_EQ(model.value()->config().rope_freq_scale, 0.25f);
  return std::move(model).value();
}

// Decoded K (kind 0) or V (kind 1) row of (block, layer, head, row).
std::vector<float> Row(KvHarness& h, BlockId block, int layer, int kind, int head, int row) {
  const KvSpec& s = h.cache->spec();
  const uint8_t* seg = h.backend->block_data(block) + s.segment_offset(layer, kind, head);
  const auto* scales = reinterpret_cast<const uint16_t*>(seg + s.scales_offset(layer, head)) + row * s.params_per_row();
  std::vector<float> out(s.head_dim());
  DecodeKvRow(s.dtype(layer, head), seg + row * s.row_bytes(layer, head), scales, s.head_dim(), s.group_size(),
              out.data());
  return out;
}

// Max |a - b| relative to the rows' magnitude.
float RelativeRowError(const std::vector<float>& a, const std::vector<float>& b) {
  float amax = 1e-6f, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    amax = std::max({amax, std::fabs(a[i]), std::fabs(b[i])});
    err = std::max(err, std::fabs(a[i] - b[i]));
  }
  return err / amax;
}

struct ShiftCase {
  KvDtype dtype;
  float tolerance;  // relative to the row's largest value
};

class ShiftKeysTest : public ::testing::TestWithParam<ShiftCase> {};

void CheckShift(const Model& model, const ShiftCase& c) {
  constexpr int kBlock = 4, kDelta = 8, kN = 6;
  KvHarness h(model, SpecFor(model, c.dtype, kBlock), {.num_blocks = 16});
  const int V = model.config().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(kN, V, 5);
  // Sequence 1: tokens at positions 0..5. Sequence 2: 8 other tokens first, so the same
  // tokens sit at positions 8..13, at the same offsets of its blocks 2 and 3.
  h.Run(1, tokens, 0);
  std::vector<int32_t> shifted = RandomTokens(kDelta, V, 6);
  shifted.insert(shifted.end(), tokens.begin(), tokens.end());
  h.Run(2, shifted, 0);
  const auto a = h.cache->table(1).blocks();
  const auto b = h.cache->table(2).blocks();
  const KvSpec& s = h.cache->spec();

  std::vector<std::vector<float>> before_k, before_v;
  for (int p = 0; p < kN; ++p) {
    for (int l = 0; l < s.num_layers(); ++l) {
      for (int g = 0; g < s.num_kv_heads(); ++g) {
        before_k.push_back(Row(h, a[p / kBlock], l, 0, g, p % kBlock));
        before_v.push_back(Row(h, a[p / kBlock], l, 1, g, p % kBlock));
      }
    }
  }
  const std::vector<int32_t> ids(a.begin(), a.end());
  ASSERT_TRUE(h.backend->ShiftKeys(ids, kDelta).ok());
  size_t i = 0;
  for (int p = 0; p < kN; ++p) {
    for (int l = 0; l < s.num_layers(); ++l) {
      for (int g = 0; g < s.num_kv_heads(); ++g, ++i) {
        const auto got = Row(h, a[p / kBlock], l, 0, g, p % kBlock);
        const auto fresh = Row(h, b[(p + kDelta) / kBlock], l, 0, g, p % kBlock);
        EXPECT_LE(RelativeRowError(got, fresh), c.tolerance)
            << KvDtypeName(c.dtype) << " position " << p << " layer " << l << " head " << g;
        EXPECT_EQ(Row(h, a[p / kBlock], l, 1, g, p % kBlock), before_v[i]) << "V must not change";
      }
    }
  }
  // And back: -delta restores the keys (two re-encodings for the quantized dtypes).
  ASSERT_TRUE(h.backend->ShiftKeys(ids, -kDelta).ok());
  i = 0;
  for (int p = 0; p < kN; ++p) {
    for (int l = 0; l < s.num_layers(); ++l) {
      for (int g = 0; g < s.num_kv_heads(); ++g, ++i) {
        EXPECT_LE(RelativeRowError(Row(h, a[p / kBlock], l, 0, g, p % kBlock), before_k[i]), 2 * c.tolerance)
            << KvDtypeName(c.dtype) << " round trip, position " << p;
      }
    }
  }
}

TEST_P(ShiftKeysTest, ShiftedKeysEqualKeysWrittenAtTheNewPosition) {
  CheckShift(*LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1), GetParam());
}

TEST_P(ShiftKeysTest, HonoursLinearRopeScaling) { CheckShift(*ScaledRopeModel(), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Dtypes, ShiftKeysTest,
                         ::testing::Values(ShiftCase{KvDtype::kF32, 1e-5f}, ShiftCase{KvDtype::kF16, 2e-3f},
                                           ShiftCase{KvDtype::kBF16, 1.6e-2f},
                                           ShiftCase{KvDtype::kInt8, 2.5f / 127},
                                           ShiftCase{KvDtype::kInt4, 2.5f / 7}),
                         [](const auto& info) { return std::string(KvDtypeName(info.param.dtype)); });

TEST(ShiftKeys, RejectsBadBlocks) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 4});
  const std::vector<int32_t> bad = {4};
  EXPECT_EQ(h.backend->ShiftKeys(bad, 3).code(), StatusCode::kInvalidArgument);
}

// Decodes `total` tokens one at a time under `policy` and checks every step's logits against a
// fresh dense prefill of the tokens the cache holds, at positions 0..k-1.
struct WindowRun {
  std::vector<int> eviction_steps;
  float max_error = 0;
};

WindowRun DecodeUnderWindow(KvHarness& h, SeqId seq, const std::vector<int32_t>& tokens, int prefill,
                            const WindowPolicy& policy, std::vector<int32_t> cached = {}) {
  WindowRun run;
  const int start = static_cast<int>(cached.size());
  h.Run(seq, std::span(tokens).subspan(start, prefill - start), start);
  cached.assign(tokens.begin(), tokens.begin() + prefill);
  const int sink_tokens = (policy.sink_tokens + h.cache->block_size() - 1) / h.cache->block_size() *
                          h.cache->block_size();
  for (int t = prefill; t < static_cast<int>(tokens.size()); ++t) {
    const auto ev = h.cache->EvictForWindow(seq, policy, 1);
    if (ev.evicted_tokens > 0) {
      run.eviction_steps.push_back(t);
      EXPECT_TRUE(h.backend->CopyBlocks(ev.copies).ok());
      EXPECT_TRUE(h.backend->ShiftKeys(ev.shifted_blocks, -ev.evicted_tokens).ok());
      cached.erase(cached.begin() + sink_tokens, cached.begin() + sink_tokens + ev.evicted_tokens);
    }
    const int position = static_cast<int>(cached.size());
    const std::vector<float> logits = h.Run(seq, std::span(tokens).subspan(t, 1), position);
    cached.push_back(tokens[t]);
    const auto ref = testing::ReferenceLogits(h.model, cached);  // positions 0..k-1
    run.max_error = std::max(run.max_error, testing::MaxAbsDiff(logits, ref.back()));
  }
  return run;
}

TEST(SlidingWindow, LogitsAfterEvictionEqualAFreshPrefillOfTheKeptTokens) {
  auto model = LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1);
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 32});
  const auto tokens = RandomTokens(30, model->config().vocab_size, 11);
  // Window 16, sinks 4: at 16 cached tokens one block (4 tokens) goes, every 4 steps.
  const WindowRun run = DecodeUnderWindow(h, 1, tokens, 14, WindowPolicy::Sliding(16, 4));
  EXPECT_EQ(run.eviction_steps, (std::vector<int>{16, 20, 24, 28}));
  EXPECT_LE(run.max_error, 1e-4f);
  EXPECT_EQ(h.cache->stats().evicted_blocks[static_cast<int>(EvictionReason::kWindow)], 4);
  EXPECT_EQ(h.cache->table(1).num_tokens(), 14);
}

TEST(SlidingWindow, LargerWindowEvictsAQuarterAtATime) {
  auto model = LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1);
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 32});
  const auto tokens = RandomTokens(70, model->config().vocab_size, 12);
  // Window 32, sinks 6 (2 blocks): 8 tokens evicted whenever the cache is full.
  const WindowRun run = DecodeUnderWindow(h, 1, tokens, 20, WindowPolicy::Sliding(32, 6));
  EXPECT_EQ(run.eviction_steps, (std::vector<int>{32, 40, 48, 56, 64}));
  EXPECT_LE(run.max_error, 1e-4f);
}

TEST(SlidingWindow, SharedPrefixIsCopiedNotRotatedUnderItsOwner) {
  auto model = LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1);
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 32});
  const int V = model->config().vocab_size;
  const auto system = RandomTokens(13, V, 13);
  h.Run(1, system, 0);
  h.cache->CommitComputed(1, system, 13, "");
  // Session 2 reuses the system prompt's 3 full blocks, then decodes past its window.
  auto session = system;
  const auto more = RandomTokens(20, V, 14);
  session.insert(session.end(), more.begin(), more.end());
  ASSERT_EQ(h.cache->AcquireCachedPrefix(2, session, ""), 12);
  const WindowRun run = DecodeUnderWindow(h, 2, session, 16, WindowPolicy::Sliding(16, 4),
                                          std::vector<int32_t>(session.begin(), session.begin() + 12));
  EXPECT_FALSE(run.eviction_steps.empty());
  EXPECT_LE(run.max_error, 1e-4f);
  // The owner of the system prompt still decodes correctly from its untouched blocks.
  std::vector<int32_t> owner = system;
  owner.push_back(42);
  const auto logits = h.Run(1, std::span(owner).subspan(13, 1), 13);
  EXPECT_LE(testing::MaxAbsDiff(logits, testing::ReferenceLogits(*model, owner).back()), 1e-4f);
}

TEST(SlidingWindow, QuantizedCacheStaysCloseAfterShifts) {
  auto model = LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1);
  for (auto [dtype, tolerance] : {std::pair{KvDtype::kF16, 3e-3f}, std::pair{KvDtype::kInt8, 5e-2f}}) {
    KvHarness h(*model, SpecFor(*model, dtype, 4), {.num_blocks = 32});
    const auto tokens = RandomTokens(30, model->config().vocab_size, 15);
    const WindowRun run = DecodeUnderWindow(h, 1, tokens, 14, WindowPolicy::Sliding(16, 4));
    EXPECT_EQ(run.eviction_steps.size(), 4u);
    EXPECT_LE(run.max_error, tolerance) << KvDtypeName(dtype);
  }
}

}  // namespace kv_window_shift_test
}  // namespace kvserve
