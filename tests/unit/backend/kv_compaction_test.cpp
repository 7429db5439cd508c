// Compaction with a real model: after old blocks move to the compact region (a smaller
// dtype), attention over the mixed table gives the logits of a single-region cache holding
// exactly the compact blocks' values (decoded into F32), for decode (a lone query, in place
// where the kernels can) and for a prefill chunk (query tiles). A chat turn that truncates
// into a compact block, and window shifts of compact blocks, keep decoding like the reference.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cache/kv_codec.h"
#include "tests/unit/backend/kv_test_util.h"

namespace kvserve {
namespace kv_compaction_test {

using testing::KvHarness;
using testing::LoadModelOrDie;
using testing::MaxAbsDiff;
using testing::RandomTokens;
using testing::SpecFor;

struct Case {
  const char* model;
  KvDtype compact;
};

class Compaction : public ::testing::TestWithParam<Case> {};

TEST_P(Compaction, MixedTablesReadTheCompactValues) {
  const Case c = GetParam();
  auto model = LoadModelOrDie(c.model, /*num_layers=*/1);
  const int V = model->config().vocab_size;
  constexpr int kBlock = 4;
  const KvSpec main = SpecFor(*model, KvDtype::kF32, kBlock);
  const KvSpec compact = SpecFor(*model, c.compact, kBlock);
  KvCacheManagerConfig with;
  with.num_blocks = 24;
  with.num_compact_blocks = 12;
  with.compact_spec = compact;
  KvHarness h(*model, main, with);
  KvHarness ref(*model, main, {.num_blocks = 24});
  const std::vector<int32_t> prompt = RandomTokens(38, V, 5);
  h.Run(1, prompt, 0);
  ref.Run(1, prompt, 0);

  const auto copies = h.cache->Compact(1, /*keep_recent_tokens=*/10);
  ASSERT_EQ(copies.size(), 7u);  // blocks ending at or before position 28
  ASSERT_TRUE(h.backend->CopyBlocks(copies).ok());
  // The reference holds what the compact blocks decode to, in F32.
  std::vector<uint8_t> tmp(compact.block_bytes());
  for (int i = 0; i < 7; ++i) {
    uint8_t* block = ref.backend->block_data(ref.cache->table(1).blocks()[i]);
    ConvertKvBlock(main, block, compact, tmp.data());
    ConvertKvBlock(compact, tmp.data(), main, block);
  }
  for (const auto& [src, dst] : copies) EXPECT_TRUE(h.cache->is_compact_block(dst));

  // Decode two tokens (lone queries), then a chunk of five (a query tile).
  int pos = static_cast<int>(prompt.size());
  for (const std::vector<int32_t>& step : {RandomTokens(1, V, 6), RandomTokens(1, V, 7), RandomTokens(5, V, 8)}) {
    const auto got = h.Run(1, step, pos);
    const auto want = ref.Run(1, step, pos);
    EXPECT_LE(MaxAbsDiff(got, want), 2e-5f) << "at position " << pos;
    pos += static_cast<int>(step.size());
  }

  // A chat turn that diverges inside a compact block: its kept rows come back to the main
  // region (converted) and decoding continues as in the reference.
  auto back = h.cache->Truncate(1, 14);
  auto back_ref = ref.cache->Truncate(1, 14);
  ASSERT_TRUE(back.has_value() && back_ref.has_value());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_FALSE(h.cache->is_compact_block((*back)[0].second));
  ASSERT_TRUE(h.backend->CopyBlocks(*back).ok());
  const auto turn = RandomTokens(3, V, 9);
  EXPECT_LE(MaxAbsDiff(h.Run(1, turn, 14), ref.Run(1, turn, 14)), 2e-5f);

  // Re-rotated keys (a sliding window's shift) of compact blocks: decode, rotate, re-encode
  // in their dtype; the reference does the same through a compact round trip.
  const std::vector<int32_t> shifted = {h.cache->table(1).blocks()[0]};
  ASSERT_TRUE(h.cache->is_compact_block(shifted[0]));
  ASSERT_TRUE(h.backend->ShiftKeys(shifted, -3).ok());
  uint8_t* rblock = ref.backend->block_data(ref.cache->table(1).blocks()[0]);
  ASSERT_TRUE(ref.backend->ShiftKeys(std::vector<int32_t>{ref.cache->table(1).blocks()[0]}, -3).ok());
  ConvertKvBlock(main, rblock, compact, tmp.data());
  ConvertKvBlock(compact, tmp.data(), main, rblock);
  const auto next = RandomTokens(1, V, 10);
  EXPECT_LE(MaxAbsDiff(h.Run(1, next, 17), ref.Run(1, next, 17)), 2e-5f);
}

// tiny: head dim 16 (decoded rows); one layer of 150m: head dim 64 (INT8/INT4 read in place).
INSTANTIATE_TEST_SUITE_P(Models, Compaction,
                         ::testing::Values(Case{"synthetic:tiny:f32", KvDtype::kInt8},
                                           Case{"synthetic:tiny:f32", KvDtype::kInt4},
                                           Case{"synthetic:tiny:f32", KvDtype::kInt4C},
                                           Case{"synthetic:150m:f16", KvDtype::kInt8},
                                           Case{"synthetic:150m:f16", KvDtype::kInt4}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.model).substr(10, 4) + "_" +
                                              std::string(KvDtypeName(info.param.compact));
                           for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

TEST(Compaction, TheCpuBackendRefusesItBesideStagedKeys) {
  auto model = LoadModelOrDie("synthetic:tiny:f32");
  CpuBackend backend(*model, {});
  ASSERT_TRUE(backend.InitKvCache(SpecFor(*model, KvDtype::kInt4C, 4), 4).ok());
  EXPECT_FALSE(backend.InitCompactKvCache(SpecFor(*model, KvDtype::kInt4, 4), 4).ok());
  ASSERT_TRUE(backend.InitKvCache(SpecFor(*model, KvDtype::kF16, 4), 4).ok());
  EXPECT_FALSE(backend.InitCompactKvCache(SpecFor(*model, KvDtype::kInt4, 8), 4).ok());  // block size differs
  EXPECT_TRUE(backend.InitCompactKvCache(SpecFor(*model, KvDtype::kInt4, 4), 4).ok());
}

}  // namespace kv_compaction_test
}  // namespace kvserve
