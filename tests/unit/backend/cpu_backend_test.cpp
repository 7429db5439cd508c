// The paged CPU forward pass against the dense reference, across chunked prefill, decode,
// several sequences per step, scattered block tables and every KV dtype.
#include "engine/backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <random>

#include "cache/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "tests/unit/backend/kv_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace cpu_backend_test {

std::unique_ptr<Model> TinyModel(const std::string& spec = "synthetic:tiny:f32", int num_layers = 0) {
  ModelLoadOptions o;
  o.seed = 7;
  o.num_layers_override = num_layers;
  auto m = Model::Load(spec, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

using testing::RandomTokens;

struct Harness {
  Harness(const Model& model, KvDtype dtype, int block_size, int num_blocks) {
    KvSpecConfig c;
    c.num_layers = model.config().num_layers;
    c.num_kv_heads = model.config().num_kv_heads;
    c.head_dim = model.config().head_dim;
    c.block_size = block_size;
    c.dtype = dtype;
    cache = std::make_unique<KvCacheManager>(*KvSpec::Create(c), num_blocks);
    CpuBackendOptions bo;
    bo.limits.max_num_tokens = 256;
    backend = std::make_unique<CpuBackend>(model, bo);
    EXPECT_TRUE(backend->InitKvCache(cache->spec(), num_blocks).ok());
    runner = std::make_unique<ModelRunner>(backend.get(), cache.get(), model.config().vocab_size);
  }
  std::unique_ptr<KvCacheManager> cache;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<ModelRunner> runner;
};

TEST(CpuBackend, PagedChunkedBatchedForwardMatchesDenseReference) {
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  Harness h(*model, KvDtype::kF32, 4, 32);
  // Scatter the free list so tables are not contiguous.
  ASSERT_TRUE(h.cache->AllocateSlots(100, 4 * 7).has_value());
  ASSERT_TRUE(h.cache->AllocateSlots(101, 4 * 5).has_value());
  h.cache->Free(100);

  std::vector<int32_t> a = RandomTokens(14, V, 1), b = RandomTokens(9, V, 2);
  const auto ref_a = testing::ReferenceLogits(*model, a);
  const auto ref_b = testing::ReferenceLogits(*model, b);
  std::vector<float> logits(2 * V);
  auto expect_close = [&](const float* got, const std::vector<float>& want, const char* what) {
    for (int i = 0; i < V; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << what << " vocab " << i;
  };

  // Step 1: a's first 10 tokens (no logits: prefill continues), b's first 6.
  ASSERT_TRUE(h.cache->AllocateSlots(1, 10).has_value());
  ASSERT_TRUE(h.cache->AllocateSlots(2, 6).has_value());
  std::vector<ScheduledSeq> step = {{1, std::span(a).subspan(0, 10), 0, false},
                                    {2, std::span(b).subspan(0, 6), 0, true}};
  ASSERT_TRUE(h.runner->Execute(step, logits).ok());
  expect_close(logits.data(), ref_b[5], "b after chunk 1");
  // Step 2: a's remaining 3 prompt tokens + b's next 3.
  ASSERT_TRUE(h.cache->AllocateSlots(1, 3).has_value());
  ASSERT_TRUE(h.cache->AllocateSlots(2, 3).has_value());
  step = {{1, std::span(a).subspan(10, 3), 10, true}, {2, std::span(b).subspan(6, 3), 6, true}};
  ASSERT_TRUE(h.runner->Execute(step, logits).ok());
  expect_close(logits.data(), ref_a[12], "a end of prefill");
  expect_close(logits.data() + V, ref_b[8], "b end of prefill");
  // Step 3: a decodes its 14th token alone.
  ASSERT_TRUE(h.cache->AllocateSlots(1, 1).has_value());
  step = {{1, std::span(a).subspan(13, 1), 13, true}};
  ASSERT_TRUE(h.runner->Execute(step, logits).ok());
  expect_close(logits.data(), ref_a[13], "a decode");
  EXPECT_TRUE(h.cache->VerifyIntegrity().ok());
}

// Qwen3 (per-head Q/K norms, q_dim != dim) and Gemma (scaled embeddings, GELU gate, tied
// output, one KV head) against the dense double-precision reference, prefilled in two chunks.
TEST(CpuBackend, Qwen3AndGemmaMatchTheDenseReference) {
  for (const char* spec : {"synthetic:qwen3-tiny:f32", "synthetic:gemma-tiny:f32"}) {
    auto model = TinyModel(spec);
    const int V = model->config().vocab_size;
    const std::vector<int32_t> tokens = RandomTokens(21, V, 5);
    const auto ref = testing::ReferenceLogits(*model, tokens);
    Harness h(*model, KvDtype::kF32, 4, 16);
    ASSERT_TRUE(h.cache->AllocateSlots(1, 21).has_value());
    std::vector<float> logits(V);
    ScheduledSeq first{1, std::span(tokens).subspan(0, 13), 0, 1};
    ASSERT_TRUE(h.runner->Execute(std::span(&first, 1), logits).ok());
    ScheduledSeq second{1, std::span(tokens).subspan(13), 13, 1};
    ASSERT_TRUE(h.runner->Execute(std::span(&second, 1), logits).ok());
    float max_err = 0, max_ref = 0;
    for (int i = 0; i < V; ++i) {
      max_err = std::max(max_err, std::fabs(logits[i] - ref[20][i]));
      max_ref = std::max(max_ref, std::fabs(ref[20][i]));
    }
    EXPECT_LT(max_err, 1e-4f * std::max(1.0f, max_ref)) << spec;
  }
}

// Attention query tiles share K/V block reads between a chunk's queries; every query's
// arithmetic stays what it is alone, so any tile size gives the same bits (windows and
// soft-capping on gemma2-tiny, staged INT4C keys on tiny, quantized blocks decoded once per
// tile; one layer of 150m, head dim 64, where a lone query reads INT8/INT4 rows in place).
TEST(CpuBackend, AttentionQueryTilesDoNotChangeTheBits) {
  struct Case {
    const char* spec;
    KvDtype kv;
    int layers;
  };
  std::string loaded;  // one load per model (150m takes a second)
  std::unique_ptr<Model> model;
  for (const auto& [spec, kv, layers] :
       {Case{"synthetic:gemma2-tiny:f32", KvDtype::kF16, 0}, Case{"synthetic:gemma2-tiny:f32", KvDtype::kInt8, 0},
        Case{"synthetic:tiny:f32", KvDtype::kInt4, 0}, Case{"synthetic:tiny:f32", KvDtype::kInt4C, 0},
        Case{"synthetic:150m:f16", KvDtype::kInt8, 1}, Case{"synthetic:150m:f16", KvDtype::kInt4, 1}}) {
    if (loaded != spec) model = TinyModel(spec, layers), loaded = spec;
    if (model->config().head_dim == 64) {
      ASSERT_TRUE(cpu::Kernels().kv_in_place(64, 64));  // tile 1 below reads in place
    }
    const int V = model->config().vocab_size;
    const std::vector<int32_t> a = RandomTokens(45, V, 8), b = RandomTokens(19, V, 9);
    std::vector<std::vector<float>> runs;
    for (int tile : {1, 3, 8, 64}) {
      KvSpecConfig kc;
      kc.num_layers = model->config().num_layers;
      kc.num_kv_heads = model->config().num_kv_heads;
      kc.head_dim = model->config().head_dim;
      kc.block_size = 4;
      kc.dtype = kv;
      KvCacheManager cache(*KvSpec::Create(kc), 64);
      CpuBackendOptions bo;
      bo.limits.max_num_tokens = 256;
      bo.attention_query_tile = tile;
      CpuBackend backend(*model, bo);
      ASSERT_TRUE(backend.InitKvCache(cache.spec(), 64).ok());
      ModelRunner runner(&backend, &cache, V);
      // Two sequences in one pass (tiles never cross sequences), then a second chunk of a.
      ASSERT_TRUE(cache.AllocateSlots(1, 45).has_value());
      ASSERT_TRUE(cache.AllocateSlots(2, 19).has_value());
      std::vector<float> logits(2 * V), more(V);
      const ScheduledSeq first[] = {{1, std::span(a).subspan(0, 30), 0, 1}, {2, b, 0, 1}};
      ASSERT_TRUE(runner.Execute(first, logits).ok());
      const ScheduledSeq second{1, std::span(a).subspan(30), 30, 1};
      ASSERT_TRUE(runner.Execute(std::span(&second, 1), more).ok());
      logits.insert(logits.end(), more.begin(), more.end());
      runs.push_back(logits);
    }
    for (size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[0]) << spec << " run " << i;
  }
}

TEST(CpuBackend, QuantizedAndHalfKvStayCloseToF32) {
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(40, V, 3);
  const auto ref = testing::ReferenceLogits(*model, tokens);
  // Maximum |logit error| allowed per dtype (logits here have magnitude ~1).
  const std::vector<std::pair<KvDtype, float>> cases = {
      {KvDtype::kF16, 2e-3f}, {KvDtype::kBF16, 2e-2f}, {KvDtype::kInt8, 3e-2f}, {KvDtype::kInt4, 0.3f},
      {KvDtype::kInt4C, 0.3f}};
  for (auto [dtype, tolerance] : cases) {
    Harness h(*model, dtype, 16, 8);
    ASSERT_TRUE(h.cache->AllocateSlots(1, 40).has_value());
    std::vector<float> logits(V);
    ScheduledSeq s{1, tokens, 0, true};
    ASSERT_TRUE(h.runner->Execute(std::span(&s, 1), logits).ok());
    float max_err = 0;
    for (int i = 0; i < V; ++i) max_err = std::max(max_err, std::fabs(logits[i] - ref[39][i]));
    EXPECT_LT(max_err, tolerance) << KvDtypeName(dtype);
    EXPECT_GT(max_err, 0.0f) << KvDtypeName(dtype) << " should differ from f32 at all";
  }
}

TEST(CpuBackend, HalfPrecisionWeightsMatchTheirOwnReference) {
  for (const char* spec : {"synthetic:tiny:f16", "synthetic:tiny:bf16", "synthetic:tiny:q8_0"}) {
    auto model = TinyModel(spec);
    const int V = model->config().vocab_size;
    const std::vector<int32_t> tokens = RandomTokens(12, V, 4);
    const auto ref = testing::ReferenceLogits(*model, tokens);
    Harness h(*model, KvDtype::kF32, 16, 4);
    ASSERT_TRUE(h.cache->AllocateSlots(1, 12).has_value());
    std::vector<float> logits(V);
    ScheduledSeq s{1, tokens, 0, true};
    ASSERT_TRUE(h.runner->Execute(std::span(&s, 1), logits).ok());
    for (int i = 0; i < V; ++i) ASSERT_NEAR(logits[i], ref[11][i], 1e-4) << spec;
  }
}

TEST(CpuBackend, RejectsMalformedBatches) {
  auto model = TinyModel();
  Harness h(*model, KvDtype::kF32, 4, 4);
  std::vector<float> logits(model->config().vocab_size);
  const std::vector<int32_t> bad_token = {model->config().vocab_size};
  const std::vector<int32_t> pos = {0}, qs = {0, 1}, lens = {1}, table = {0}, li = {0};
  const std::vector<int64_t> slots = {0};
  ForwardBatch b;
  b.token_ids = bad_token;
  b.positions = pos;
  b.slot_mapping = slots;
  b.query_start = qs;
  b.seq_lens = lens;
  b.block_tables = table;
  b.max_blocks_per_seq = 1;
  b.logits_indices = li;
  EXPECT_EQ(h.backend->Forward(b, logits).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> ok_token = {5};
  const std::vector<int64_t> bad_slot = {4 * 4};
  b.token_ids = ok_token;
  b.slot_mapping = bad_slot;
  EXPECT_EQ(h.backend->Forward(b, logits).code(), StatusCode::kInvalidArgument);
  b.slot_mapping = slots;
  EXPECT_TRUE(h.backend->Forward(b, logits).ok());
}

// Two tokens writing one KV slot would race on the GPU: every backend refuses the batch.
TEST(CpuBackend, RejectsTwoTokensWritingOneSlot) {
  auto model = TinyModel();
  Harness h(*model, KvDtype::kF32, 4, 4);
  std::vector<float> logits(2 * static_cast<size_t>(model->config().vocab_size));
  const std::vector<int32_t> tokens = {5, 6}, pos = {0, 0}, qs = {0, 1, 2}, lens = {1, 1}, li = {0, 1};
  const std::vector<int32_t> same_table = {0, 0}, own_tables = {0, 1};
  const std::vector<int64_t> same_slot = {0, 0}, own_slots = {0, 4};
  ForwardBatch b;
  b.token_ids = tokens;
  b.positions = pos;
  b.query_start = qs;
  b.seq_lens = lens;
  b.max_blocks_per_seq = 1;
  b.logits_indices = li;
  b.block_tables = same_table;
  b.slot_mapping = same_slot;
  const Status st = h.backend->Forward(b, logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot 0 is written by two tokens"), std::string::npos) << st.ToString();
  b.block_tables = own_tables;
  b.slot_mapping = own_slots;
  EXPECT_TRUE(h.backend->Forward(b, logits).ok());
}

TEST(CpuBackend, CopyAndRawBlockAccessRoundTrip) {
  auto model = TinyModel();
  Harness h(*model, KvDtype::kInt8, 4, 4);
  ASSERT_TRUE(h.cache->AllocateSlots(1, 4).has_value());
  std::vector<float> logits(model->config().vocab_size);
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  ScheduledSeq s{1, tokens, 0, true};
  ASSERT_TRUE(h.runner->Execute(std::span(&s, 1), logits).ok());
  const size_t bytes = h.cache->spec().block_bytes();
  std::vector<uint8_t> a(bytes), b(bytes);
  ASSERT_TRUE(h.backend->ReadBlock(0, a).ok());
  const std::pair<int32_t, int32_t> copy{0, 3};
  ASSERT_TRUE(h.backend->CopyBlocks(std::span(&copy, 1)).ok());
  ASSERT_TRUE(h.backend->ReadBlock(3, b).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(h.backend->WriteBlock(2, a).ok());
  ASSERT_TRUE(h.backend->ReadBlock(2, b).ok());
  EXPECT_EQ(a, b);
  EXPECT_FALSE(h.backend->ReadBlock(4, b).ok());
}

// The batched host-offload copies (Backend's defaults, which every swap now goes through)
// move exactly what ReadBlock/WriteBlock move, and refuse a bad block like them.
TEST(CpuBackend, BatchedBlockTransfersMatchSingleBlockCopies) {
  auto model = TinyModel();
  Harness h(*model, KvDtype::kInt8, 4, 4);
  ASSERT_TRUE(h.cache->AllocateSlots(1, 8).has_value());  // blocks 0 and 1
  std::vector<float> logits(model->config().vocab_size);
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12};
  ScheduledSeq s{1, tokens, 0, true};
  ASSERT_TRUE(h.runner->Execute(std::span(&s, 1), logits).ok());
  const size_t bytes = h.cache->spec().block_bytes();
  std::vector<uint8_t> host(2 * bytes), single(bytes);
  const std::vector<Backend::BlockTransfer> out = {{1, std::span(host).first(bytes)},
                                                   {0, std::span(host).last(bytes)}};
  ASSERT_TRUE(h.backend->ReadBlocks(out).ok());
  ASSERT_TRUE(h.backend->ReadBlock(1, single).ok());
  EXPECT_TRUE(std::equal(single.begin(), single.end(), host.begin()));
  ASSERT_TRUE(h.backend->ReadBlock(0, single).ok());
  EXPECT_TRUE(std::equal(single.begin(), single.end(), host.begin() + static_cast<std::ptrdiff_t>(bytes)));
  // Back into blocks 3 and 2: 3 holds block 1's bytes, 2 block 0's.
  const std::vector<Backend::BlockTransfer> in = {{3, std::span(host).first(bytes)},
                                                  {2, std::span(host).last(bytes)}};
  ASSERT_TRUE(h.backend->WriteBlocks(in).ok());
  std::vector<uint8_t> a(bytes), b(bytes);
  for (const auto& [from, to] : {std::pair{1, 3}, std::pair{0, 2}}) {
    ASSERT_TRUE(h.backend->ReadBlock(from, a).ok());
    ASSERT_TRUE(h.backend->ReadBlock(to, b).ok());
    EXPECT_EQ(a, b) << from << " -> " << to;
  }
  const std::vector<Backend::BlockTransfer> bad = {{0, std::span(host).first(bytes)}, {4, std::span(host).last(bytes)}};
  EXPECT_EQ(h.backend->ReadBlocks(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace cpu_backend_test
}  // namespace kvserve
