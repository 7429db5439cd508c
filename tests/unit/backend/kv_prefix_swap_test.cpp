// Prefix sharing, fork and the host tier with a real model: requests served from shared or
// swapped blocks produce the same logits as a fresh dense computation, a forced hash collision
// is served correctly, and a host round trip returns identical bytes.
#include <gtest/gtest.h>

#include "tests/unit/backend/kv_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace kv_prefix_swap_test {

using testing::KvHarness;
using testing::LoadModelOrDie;
using testing::MaxAbsDiff;
using testing::RandomTokens;
using testing::SpecFor;

BlockHash FirstTokenHash(const BlockHash&, std::span<const int32_t> tokens, std::string_view) {
  BlockHash h{};
  h[0] = static_cast<uint8_t>(tokens[0]);
  h[1] = static_cast<uint8_t>(tokens[0] >> 8);
  return h;
}

// Prefix lookup, compute the rest, commit: the engine's path for a new prompt.
std::vector<float> Serve(KvHarness& h, SeqId seq, const std::vector<int32_t>& prompt, int* hit) {
  *hit = h.cache->AcquireCachedPrefix(seq, prompt, "");
  auto logits = h.Run(seq, std::span(prompt).subspan(*hit), *hit);
  h.cache->CommitComputed(seq, prompt, static_cast<int>(prompt.size()), "");
  return logits;
}

TEST(PrefixSharing, HitsAndForcedCollisionsServeTheRightLogits) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const int V = model->config().vocab_size;
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 32, .test_hooks = {.prefix_hash = &FirstTokenHash}});
  const std::vector<int32_t> a = RandomTokens(11, V, 1);
  std::vector<int32_t> b = a;
  b[2] = (b[2] + 1) % V;  // block 0 collides with a's under the weak hash
  std::vector<int32_t> c(a.begin(), a.begin() + 8);
  const auto tail = RandomTokens(5, V, 2);
  c.insert(c.end(), tail.begin(), tail.end());
  int hit = -1;
  auto logits = Serve(h, 1, a, &hit);
  EXPECT_EQ(hit, 0);
  EXPECT_LE(MaxAbsDiff(logits, testing::ReferenceLogits(*model, a).back()), 1e-4f);
  logits = Serve(h, 2, b, &hit);
  EXPECT_EQ(hit, 0);  // collision detected: computed, not served from a's blocks
  EXPECT_LE(MaxAbsDiff(logits, testing::ReferenceLogits(*model, b).back()), 1e-4f);
  logits = Serve(h, 3, c, &hit);
  EXPECT_EQ(hit, 8);  // a's first two blocks
  EXPECT_EQ(h.cache->table(3).blocks()[0], h.cache->table(1).blocks()[0]);
  EXPECT_LE(MaxAbsDiff(logits, testing::ReferenceLogits(*model, c).back()), 1e-4f);
}

TEST(PrefixSharing, ForkedSequencesDecodeIndependently) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const int V = model->config().vocab_size;
  KvHarness h(*model, SpecFor(*model, KvDtype::kF32, 4), {.num_blocks = 32});
  std::vector<int32_t> parent = RandomTokens(10, V, 3);
  h.Run(1, parent, 0);
  auto copies = h.cache->Fork(1, 2);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 1u);  // the partial third block
  ASSERT_TRUE(h.backend->CopyBlocks(*copies).ok());
  std::vector<int32_t> child = parent;
  for (int step = 0; step < 6; ++step) {
    parent.push_back(10 + step);
    child.push_back(200 + step);
    const int pos = static_cast<int>(parent.size()) - 1;
    const auto lp = h.Run(1, std::span(parent).subspan(pos, 1), pos);
    const auto lc = h.Run(2, std::span(child).subspan(pos, 1), pos);
    EXPECT_LE(MaxAbsDiff(lp, testing::ReferenceLogits(*model, parent).back()), 1e-4f) << step;
    EXPECT_LE(MaxAbsDiff(lc, testing::ReferenceLogits(*model, child).back()), 1e-4f) << step;
  }
}

struct RoundTripCase {
  KvDtype dtype;
  // Largest |logit difference| from the run that never swapped over the next tokens. INT4C: a
  // partially filled block leaves with its staged F16 keys encoded over the rows it has and
  // continues from those codes, so it comes back within INT4 of the uninterrupted run.
  float tolerance;
};

class HostRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(HostRoundTrip, SwappedBlocksComeBackByteIdenticalAndDecodingContinues) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const int V = model->config().vocab_size;
  const KvSpec spec = SpecFor(*model, GetParam().dtype, 4);
  KvHarness h(*model, spec, {.num_blocks = 8, .num_host_blocks = 4});
  KvHarness control(*model, spec, {.num_blocks = 8});
  std::vector<int32_t> tokens = RandomTokens(10, V, 4);
  h.Run(1, tokens, 0);
  control.Run(1, tokens, 0);
  const size_t bytes = spec.block_bytes();
  std::vector<std::vector<uint8_t>> original;
  for (BlockId b : h.cache->table(1).blocks()) {
    original.emplace_back(bytes);
    ASSERT_TRUE(h.backend->ReadBlock(b, original.back()).ok());
  }
  auto out = h.cache->SwapOut(1);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->device_host.size(), 3u);
  for (auto [b, slot] : out->device_host) {
    ASSERT_TRUE(h.backend->ReadBlock(b, std::span(h.cache->host_block_data(slot), bytes)).ok());
  }
  if (const cpu::KeyStaging* staging = h.backend->key_staging()) {  // the freed slot goes back
    h.backend->ReleaseStaging([&](int32_t b) { return h.cache->is_free_block(b); });
    EXPECT_EQ(staging->num_slots_in_use(), 0);
  }
  // Another request overwrites every device block meanwhile.
  h.Run(2, RandomTokens(32, V, 5), 0);
  h.cache->Free(2);
  auto in = h.cache->SwapIn(1);
  ASSERT_TRUE(in.has_value());
  for (auto [b, slot] : in->device_host) {
    ASSERT_TRUE(h.backend->WriteBlock(b, std::span(h.cache->host_block_data(slot), bytes)).ok());
  }
  const auto blocks = h.cache->table(1).blocks();
  ASSERT_EQ(blocks.size(), original.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<uint8_t> now(bytes);
    ASSERT_TRUE(h.backend->ReadBlock(blocks[i], now).ok());
    EXPECT_EQ(now, original[i]) << "block " << i;
  }
  // The next tokens' logits are bit-identical to a run that never swapped (INT4C: close).
  for (int32_t next : {77, 78, 79}) {
    tokens.push_back(next);
    const int pos = static_cast<int>(tokens.size()) - 1;
    const auto swapped = h.Run(1, std::span(tokens).subspan(pos, 1), pos);
    const auto never = control.Run(1, std::span(tokens).subspan(pos, 1), pos);
    if (GetParam().tolerance == 0) {
      EXPECT_EQ(swapped, never) << pos;
    } else {
      EXPECT_LT(MaxAbsDiff(swapped, never), GetParam().tolerance) << pos;
    }
  }
  const KvCacheStats st = h.cache->stats();
  EXPECT_EQ(st.swapped_out_blocks, 3);
  EXPECT_EQ(st.swapped_in_blocks, 3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HostRoundTrip,
                         ::testing::Values(RoundTripCase{KvDtype::kF32, 0}, RoundTripCase{KvDtype::kInt8, 0},
                                           RoundTripCase{KvDtype::kInt4, 0}, RoundTripCase{KvDtype::kInt4C, 0.15f}),
                         [](const auto& info) { return std::string(KvDtypeName(info.param.dtype)); });

}  // namespace kv_prefix_swap_test
}  // namespace kvserve
