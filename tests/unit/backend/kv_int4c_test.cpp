// INT4C caches (keys per channel over a full block, the filling block staged in F16) on the CPU
// backend, against the model:
//  * a query's logits do not depend on how its prompt was chunked (its own block is always
//    read from the staged rows, earlier blocks from their codes);
//  * staging follows the partially filled blocks: a slot per such block, none once a block is
//    full, none after the cache frees the block;
//  * copy-on-write forks and key shifts carry the staged rows (host swaps: kv_prefix_swap_test).
#include <gtest/gtest.h>

#include "cache/kv_codec.h"
#include "common/fp16.h"
#include "tests/unit/backend/kv_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace kv_int4c_test {

using testing::KvHarness;
using testing::LoadModelOrDie;
using testing::MaxAbsDiff;
using testing::RandomTokens;
using testing::SpecFor;

constexpr int kBlock = 4;

// Logits of the last token after computing `tokens` in chunks of the given sizes.
std::vector<float> Chunked(const Model& model, const std::vector<int32_t>& tokens, const std::vector<int>& chunks) {
  KvHarness h(model, SpecFor(model, KvDtype::kInt4C, kBlock), {.num_blocks = 16});
  std::vector<float> logits;
  int done = 0;
  for (int n : chunks) {
    logits = h.Run(1, std::span(tokens).subspan(done, n), done);
    done += n;
  }
  CHECK_EQ(done, static_cast<int>(tokens.size()));
  return logits;
}

TEST(Int4CKv, ChunkingDoesNotChangeTheLogits) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const std::vector<int32_t> tokens = RandomTokens(30, model->config().vocab_size, 3);
  const auto whole = Chunked(*model, tokens, {30});
  EXPECT_EQ(Chunked(*model, tokens, {7, 9, 5, 9}), whole);
  EXPECT_EQ(Chunked(*model, tokens, {4, 4, 4, 4, 4, 4, 4, 1, 1}), whole);
  std::vector<int> ones(30, 1);
  EXPECT_EQ(Chunked(*model, tokens, ones), whole);
  // Close to F32 (logits ~ 1 here; INT4's per-token groups allow 0.3 in cpu_backend_test).
  const float err = MaxAbsDiff(whole, testing::ReferenceLogits(*model, tokens).back());
  EXPECT_LT(err, 0.15f);
  EXPECT_GT(err, 0.0f);
}

TEST(Int4CKv, StagingFollowsPartiallyFilledBlocks) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const int V = model->config().vocab_size;
  KvHarness h(*model, SpecFor(*model, KvDtype::kInt4C, kBlock), {.num_blocks = 16});
  const cpu::KeyStaging* staging = h.backend->key_staging();
  ASSERT_NE(staging, nullptr);
  const std::vector<int32_t> a = RandomTokens(12, V, 4);
  h.Run(1, std::span(a).subspan(0, 10), 0);
  EXPECT_EQ(staging->num_slots_in_use(), 1);  // the third block holds 2 of 4 rows
  EXPECT_TRUE(staging->has(h.cache->table(1).blocks()[2]));
  h.Run(1, std::span(a).subspan(10, 2), 10);
  EXPECT_EQ(staging->num_slots_in_use(), 0);  // full: encoded per channel
  h.Run(2, RandomTokens(5, V, 5), 0);
  EXPECT_EQ(staging->num_slots_in_use(), 1);
  h.cache->Free(2);
  h.backend->ReleaseStaging([&](int32_t b) { return h.cache->is_free_block(b); });
  EXPECT_EQ(staging->num_slots_in_use(), 0);
  // A backend without INT4C heads stages nothing.
  KvHarness plain(*model, SpecFor(*model, KvDtype::kInt4, kBlock), {.num_blocks = 16});
  EXPECT_EQ(plain.backend->key_staging(), nullptr);
}

TEST(Int4CKv, ForkedSequencesMatchRunsThatNeverForked) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  const int V = model->config().vocab_size;
  KvHarness h(*model, SpecFor(*model, KvDtype::kInt4C, kBlock), {.num_blocks = 32});
  std::vector<int32_t> parent = RandomTokens(10, V, 3);
  h.Run(1, parent, 0);
  auto copies = h.cache->Fork(1, 2);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 1u);  // the partial third block, staged rows and all
  ASSERT_TRUE(h.runner->CopyBlocks(*copies).ok());
  std::vector<int32_t> child = parent;
  for (int step = 0; step < 6; ++step) {
    parent.push_back(10 + step);
    child.push_back(200 + step);
    const int pos = static_cast<int>(parent.size()) - 1;
    const auto lp = h.Run(1, std::span(parent).subspan(pos, 1), pos);
    const auto lc = h.Run(2, std::span(child).subspan(pos, 1), pos);
    EXPECT_EQ(lp, Chunked(*model, parent, {10, pos - 10 + 1})) << step;
    EXPECT_EQ(lc, Chunked(*model, child, {10, pos - 10 + 1})) << step;
  }
}

// Key row r of (block, layer, head): staged rows while the block fills, else its codes.
std::vector<float> KeyRow(const KvHarness& h, BlockId block, int layer, int head, int r) {
  const KvSpec& s = h.cache->spec();
  std::vector<float> out(s.head_dim());
  if (const cpu::KeyStaging* st = h.backend->key_staging(); st->has(block)) {
    const uint16_t* row = st->rows(block, layer, head) + r * s.head_dim();
    for (int i = 0; i < s.head_dim(); ++i) out[i] = F16ToF32(row[i]);
    return out;
  }
  const uint8_t* seg = h.backend->block_data(block) + s.segment_offset(layer, 0, head);
  DecodeKvKeyRowPerChannel(seg + r * s.row_bytes(layer, head),
                           reinterpret_cast<const uint16_t*>(seg + s.scales_offset(layer, head)), s.head_dim(),
                           s.group_size(), out.data());
  return out;
}

// After ShiftKeys(delta) the keys equal those written at position p + delta: full blocks are
// re-encoded per channel, staged rows rotated in F16.
TEST(Int4CKv, ShiftedKeysEqualKeysWrittenAtTheNewPosition) {
  auto model = LoadModelOrDie("synthetic:tiny:f32", /*num_layers=*/1);
  constexpr int kDelta = 8, kN = 6;
  KvHarness h(*model, SpecFor(*model, KvDtype::kInt4C, kBlock), {.num_blocks = 16});
  const int V = model->config().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(kN, V, 5);
  h.Run(1, tokens, 0);
  std::vector<int32_t> shifted = RandomTokens(kDelta, V, 6);
  shifted.insert(shifted.end(), tokens.begin(), tokens.end());
  h.Run(2, shifted, 0);
  const auto a = h.cache->table(1).blocks();
  const auto b = h.cache->table(2).blocks();
  ASSERT_TRUE(h.backend->ShiftKeys(std::vector<int32_t>(a.begin(), a.end()), kDelta).ok());
  const KvSpec& s = h.cache->spec();
  for (int p = 0; p < kN; ++p) {
    for (int g = 0; g < s.num_kv_heads(); ++g) {
      const auto got = KeyRow(h, a[p / kBlock], 0, g, p % kBlock);
      const auto fresh = KeyRow(h, b[(p + kDelta) / kBlock], 0, g, p % kBlock);
      float amax = 1e-6f;
      for (float x : fresh) amax = std::max(amax, std::fabs(x));
      // Staged rows: F16 rounding twice; encoded ones: a 4-bit step per channel, twice.
      const float tol = p / kBlock == 0 ? 2.5f / 7 * amax : 4e-3f * amax;
      EXPECT_LE(MaxAbsDiff(got, fresh), tol) << "position " << p << " head " << g;
    }
  }
}

}  // namespace kv_int4c_test
}  // namespace kvserve
