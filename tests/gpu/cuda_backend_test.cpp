// The whole CUDA forward pass against the CPU backend (same model, same block tables) across
// chunked prefill, batched decode, scattered blocks and every KV dtype; CUDA-graph replay
// against eager execution; two steps in flight; block operations byte-for-byte against the
// CPU backend; malformed batches; capacity planning. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "cache/kv_cache_manager.h"
#include "cache/kv_codec.h"
#include "common/profiler.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/backend/reference_forward.h"

namespace kvserve {
namespace cuda_backend_test {

using testing::MaxAbsDiff;

std::unique_ptr<Model> TinyModel(const std::string& spec = "synthetic:tiny:f32") {
  ModelLoadOptions o;
  o.seed = 7;
  auto m = Model::Load(spec, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(3 + rng() % (vocab - 3));
  return t;
}

CudaBackendOptions Options(CudaWeightType type, bool graphs = true) {
  CudaBackendOptions o;
  o.limits.max_num_tokens = 256;
  o.limits.max_num_seqs = 16;
  o.limits.max_logits = 16;
  o.weight_type = type;
  o.use_cuda_graphs = graphs;
  return o;
}

// A cache manager + backend + runner; identical call sequences give identical block ids.
struct Harness {
  Harness(const Model& model, KvDtype dtype, int block_size, int num_blocks, std::unique_ptr<Backend> b) {
    KvSpecConfig c;
    c.num_layers = model.config().num_layers;
    c.num_kv_heads = model.config().num_kv_heads;
    c.head_dim = model.config().head_dim;
    c.block_size = block_size;
    c.dtype = dtype;
    cache = std::make_unique<KvCacheManager>(*KvSpec::Create(c), num_blocks);
    backend = std::move(b);
    EXPECT_TRUE(backend->InitKvCache(cache->spec(), num_blocks).ok());
    runner = std::make_unique<ModelRunner>(backend.get(), cache.get(), model.config().vocab_size);
  }
  std::unique_ptr<KvCacheManager> cache;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelRunner> runner;
};

std::unique_ptr<Backend> Cpu(const Model& model) {
  CpuBackendOptions o;
  o.limits.max_num_tokens = 256;
  o.limits.max_num_seqs = 16;
  o.limits.max_logits = 16;
  return std::make_unique<CpuBackend>(model, o);
}

std::unique_ptr<Backend> Cuda(const Model& model, CudaWeightType type, bool graphs = true) {
  auto b = CreateCudaBackend(model, Options(type, graphs));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(b).value() : nullptr;
}

// Runs the same schedule on every harness: two prompts in chunks, then decode steps of both,
// returning every step's logits per harness.
std::vector<std::vector<std::vector<float>>> RunSchedule(std::vector<Harness*> hs, int vocab, int decode_steps) {
  const std::vector<int32_t> a = RandomTokens(40, vocab, 1), b = RandomTokens(23, vocab, 2);
  std::vector<std::vector<std::vector<float>>> out(hs.size());
  // Scatter the free lists so block tables are not contiguous.
  for (Harness* h : hs) {
    EXPECT_TRUE(h->cache->AllocateSlots(100, 16 * 3).has_value());
    EXPECT_TRUE(h->cache->AllocateSlots(101, 16 * 2).has_value());
    h->cache->Free(100);
  }
  std::vector<int32_t> seq_a(a), seq_b(b);
  auto step = [&](std::vector<ScheduledSeq> seqs, std::vector<std::pair<SeqId, int>> alloc, int n_logits) {
    for (size_t i = 0; i < hs.size(); ++i) {
      for (auto [seq, n] : alloc) EXPECT_TRUE(hs[i]->cache->AllocateSlots(seq, n).has_value());
      std::vector<float> logits(static_cast<size_t>(n_logits) * vocab);
      const Status st = hs[i]->runner->Execute(seqs, logits);
      EXPECT_TRUE(st.ok()) << st.ToString();
      out[i].push_back(std::move(logits));
    }
  };
  // Chunk 1: a[0..25) (no logits) + b[0..10); chunk 2: a[25..40) + b[10..23).
  step({{1, std::span(seq_a).subspan(0, 25), 0, false}, {2, std::span(seq_b).subspan(0, 10), 0, true}},
       {{1, 25}, {2, 10}}, 1);
  step({{1, std::span(seq_a).subspan(25, 15), 25, true}, {2, std::span(seq_b).subspan(10, 13), 10, true}},
       {{1, 15}, {2, 13}}, 2);
  for (int s = 0; s < decode_steps; ++s) {
    seq_a.push_back(static_cast<int32_t>(3 + (s * 37) % (vocab - 3)));
    seq_b.push_back(static_cast<int32_t>(3 + (s * 53) % (vocab - 3)));
    const int pa = static_cast<int>(seq_a.size()) - 1, pb = static_cast<int>(seq_b.size()) - 1;
    step({{1, std::span(seq_a).subspan(pa, 1), pa, true}, {2, std::span(seq_b).subspan(pb, 1), pb, true}},
         {{1, 1}, {2, 1}}, 2);
  }
  return out;
}

TEST(CudaBackend, ForwardMatchesTheCpuBackendForEveryKvDtype) {
  // F32 weights on the device (no TF32): the same arithmetic up to summation order. Tolerance
  // per KV dtype: f32 1e-4 (as CPU vs the dense reference); for the lossy dtypes the bound of
  // their own quantization error vs f32 (a last-bit difference in K/V may move one quantized
  // value by one step): f16 2e-3, bf16 2e-2, int8 3e-2, int4 0.3.
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  const std::vector<std::pair<KvDtype, float>> cases = {{KvDtype::kF32, 1e-4f},
                                                        {KvDtype::kF16, 2e-3f},
                                                        {KvDtype::kBF16, 2e-2f},
                                                        {KvDtype::kInt8, 3e-2f},
                                                        {KvDtype::kInt4, 0.3f}};
  for (auto [dtype, tolerance] : cases) {
    Harness cpu(*model, dtype, 16, 24, Cpu(*model));
    Harness gpu(*model, dtype, 16, 24, Cuda(*model, CudaWeightType::kF32));
    ASSERT_NE(gpu.backend, nullptr);
    const auto out = RunSchedule({&cpu, &gpu}, V, 6);
    for (size_t s = 0; s < out[0].size(); ++s) {
      EXPECT_LT(MaxAbsDiff(out[0][s], out[1][s]), tolerance) << KvDtypeName(dtype) << " step " << s;
    }
  }
}

TEST(CudaBackend, FirstLogitsEqualTheDenseDoublePrecisionForward) {
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(37, V, 9);
  const auto ref = testing::ReferenceLogits(*model, tokens);
  Harness gpu(*model, KvDtype::kF32, 16, 8, Cuda(*model, CudaWeightType::kF32));
  ASSERT_TRUE(gpu.cache->AllocateSlots(1, 37).has_value());
  std::vector<float> logits(V);
  ScheduledSeq s{1, tokens, 0, true};
  ASSERT_TRUE(gpu.runner->Execute(std::span(&s, 1), logits).ok());
  for (int i = 0; i < V; ++i) ASSERT_NEAR(logits[i], ref[36][i], 1e-4) << "vocab " << i;
}

TEST(CudaBackend, HalfPrecisionWeightsStayCloseToTheCpu) {
  // The device feeds the GEMMs F16 (BF16) activations where the CPU keeps F32: one rounding of
  // each GEMM input. Logits here are O(0.2); tolerance 5e-3 (f16), 3e-2 (bf16).
  REQUIRE_CUDA_DEVICE();
  const std::vector<std::tuple<const char*, CudaWeightType, float>> cases = {
      {"synthetic:tiny:f16", CudaWeightType::kF16, 5e-3f},
      {"synthetic:tiny:bf16", CudaWeightType::kBF16, 3e-2f},
      {"synthetic:tiny:q8_0", CudaWeightType::kF16, 5e-3f}};
  for (auto [spec, type, tolerance] : cases) {
    auto model = TinyModel(spec);
    Harness cpu(*model, KvDtype::kF16, 16, 24, Cpu(*model));
    Harness gpu(*model, KvDtype::kF16, 16, 24, Cuda(*model, type));
    ASSERT_NE(gpu.backend, nullptr);
    const auto out = RunSchedule({&cpu, &gpu}, model->config().vocab_size, 3);
    for (size_t s = 0; s < out[0].size(); ++s) {
      EXPECT_LT(MaxAbsDiff(out[0][s], out[1][s]), tolerance) << spec << " step " << s;
    }
  }
}

TEST(CudaBackend, QuantizedWeightsReadAsStoredFollowTheCpuOnBothPaths) {
  // Q8_0 and Q4_0 matrices stay in their blocks on the device. The schedule's prompt chunks
  // (35 and 28 tokens) and decode steps (2 tokens) take the dequantize + GEMM path or the
  // matrix-vector kernel as quant_gemm_min_tokens says: 1 (always the GEMM), 32 (both), 1000
  // (always the kernel). F16 activations as in the test above: tolerance 5e-3.
  REQUIRE_CUDA_DEVICE();
  for (const char* spec : {"synthetic:tiny:q8_0", "synthetic:tiny:q4_0"}) {
    auto model = TinyModel(spec);
    for (int min_tokens : {1, 32, 1000}) {
      CudaBackendOptions o = Options(CudaWeightType::kF16);
      o.quant_gemm_min_tokens = min_tokens;
      auto b = CreateCudaBackend(*model, o);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      Harness cpu(*model, KvDtype::kF16, 16, 24, Cpu(*model));
      Harness gpu(*model, KvDtype::kF16, 16, 24, std::move(b).value());
      const auto out = RunSchedule({&cpu, &gpu}, model->config().vocab_size, 3);
      for (size_t s = 0; s < out[0].size(); ++s) {
        EXPECT_LT(MaxAbsDiff(out[0][s], out[1][s]), 5e-3f) << spec << " min tokens " << min_tokens << " step " << s;
      }
    }
  }
}

TEST(CudaBackend, GraphReplayMatchesEagerDecoding) {
  // Two sequences pad to the 2-sequence bucket; contexts stay within 4 blocks of 16: one
  // bucket, captured on its second step and replayed from then on.
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  Harness eager(*model, KvDtype::kInt8, 16, 24, Cuda(*model, CudaWeightType::kF32, /*graphs=*/false));
  Harness graph(*model, KvDtype::kInt8, 16, 24, Cuda(*model, CudaWeightType::kF32, /*graphs=*/true));
  const int decode_steps = 8;
  const auto out = RunSchedule({&eager, &graph}, V, decode_steps);
  for (size_t s = 0; s < out[0].size(); ++s) EXPECT_LT(MaxAbsDiff(out[0][s], out[1][s]), 1e-4f) << "step " << s;
  const CudaBackendStats st = static_cast<CudaBackend*>(graph.backend.get())->stats();
  EXPECT_EQ(st.graphs_captured, 1);
  EXPECT_EQ(st.graph_capture_failures, 0);
  EXPECT_EQ(st.graph_replays, decode_steps - 1);
  EXPECT_EQ(static_cast<CudaBackend*>(eager.backend.get())->stats().graph_replays, 0);
}

// A one-sequence prefill batch over consecutive blocks starting at `first_block`.
struct FlatBatch {
  std::vector<int32_t> tokens, positions, query_start, seq_lens, tables, logits;
  std::vector<int64_t> slots;
  ForwardBatch view(int max_blocks) const {
    ForwardBatch b;
    b.token_ids = tokens;
    b.positions = positions;
    b.slot_mapping = slots;
    b.query_start = query_start;
    b.seq_lens = seq_lens;
    b.block_tables = tables;
    b.max_blocks_per_seq = max_blocks;
    b.logits_indices = logits;
    return b;
  }
};
FlatBatch Prefill(const std::vector<int32_t>& tokens, int first_block, int block_size) {
  FlatBatch f;
  f.tokens = tokens;
  const int n = static_cast<int>(tokens.size());
  for (int i = 0; i < n; ++i) {
    f.positions.push_back(i);
    f.slots.push_back(static_cast<int64_t>(first_block) * block_size + i);
  }
  f.query_start = {0, n};
  f.seq_lens = {n};
  for (int j = 0; j < (n + block_size - 1) / block_size; ++j) f.tables.push_back(first_block + j);
  f.logits = {n - 1};
  return f;
}

TEST(CudaBackend, TwoStepsInFlightEqualSequentialForwards) {
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  const int V = model->config().vocab_size;
  KvSpecConfig c;
  c.num_layers = model->config().num_layers;
  c.num_kv_heads = model->config().num_kv_heads;
  c.head_dim = model->config().head_dim;
  const KvSpec spec = *KvSpec::Create(c);
  auto overlapped = CreateCudaBackendWithRandomWeights(model->config(), 5, Options(CudaWeightType::kF16));
  auto sequential = CreateCudaBackendWithRandomWeights(model->config(), 5, Options(CudaWeightType::kF16));
  ASSERT_TRUE(overlapped.ok() && sequential.ok());
  ASSERT_TRUE((*overlapped)->InitKvCache(spec, 8).ok());
  ASSERT_TRUE((*sequential)->InitKvCache(spec, 8).ok());
  const FlatBatch a = Prefill(RandomTokens(30, V, 1), 0, 16), b = Prefill(RandomTokens(20, V, 2), 4, 16);
  std::vector<float> want_a(V), want_b(V), got_a(V), got_b(V);
  ASSERT_TRUE((*sequential)->Forward(a.view(2), want_a).ok());
  ASSERT_TRUE((*sequential)->Forward(b.view(2), want_b).ok());
  CudaBackend& o = **overlapped;
  ASSERT_TRUE(o.Launch(a.view(2)).ok());
  ASSERT_TRUE(o.Launch(b.view(2)).ok());
  EXPECT_EQ(o.Launch(a.view(2)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(o.Forward(a.view(2), got_a).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(o.Wait(got_a).ok());
  ASSERT_TRUE(o.Wait(got_b).ok());
  EXPECT_EQ(o.Wait(got_b).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  for (float x : got_a) ASSERT_TRUE(std::isfinite(x));
}

TEST(CudaBackend, BlockOperationsMatchTheCpuBackendByteForByte) {
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  const ModelConfig& mc = model->config();
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4}) {
    KvSpecConfig c;
    c.num_layers = mc.num_layers;
    c.num_kv_heads = mc.num_kv_heads;
    c.head_dim = mc.head_dim;
    c.dtype = dtype;
    c.group_size = 8;
    const KvSpec spec = *KvSpec::Create(c);
    const int num_blocks = 6;
    auto cpu = Cpu(*model);
    auto gpu = Cuda(*model, CudaWeightType::kF16);
    ASSERT_NE(gpu, nullptr);
    ASSERT_TRUE(cpu->InitKvCache(spec, num_blocks).ok());
    ASSERT_TRUE(gpu->InitKvCache(spec, num_blocks).ok());
    // Fill every block with encoded random rows (valid bytes for every dtype), on both.
    std::mt19937 rng(3);
    std::normal_distribution<float> dist;
    std::vector<float> row(spec.head_dim());
    std::vector<uint8_t> data(spec.row_bytes(0, 0));
    std::vector<uint16_t> scales(spec.params_per_row());
    for (int b = 0; b < num_blocks; ++b) {
      std::vector<uint8_t> block(spec.block_bytes(), 0);
      for (int l = 0; l < spec.num_layers(); ++l)
        for (int kind = 0; kind < 2; ++kind)
          for (int h = 0; h < spec.num_kv_heads(); ++h)
            for (int r = 0; r < spec.block_size(); ++r) {
              for (float& x : row) x = dist(rng);
              EncodeKvRow(dtype, row.data(), spec.head_dim(), spec.group_size(), data.data(), scales.data());
              uint8_t* seg = block.data() + spec.segment_offset(l, kind, h);
              std::memcpy(seg + r * data.size(), data.data(), data.size());
              if (IsQuantized(dtype)) {
                std::memcpy(seg + spec.scales_offset(l, h) + r * scales.size() * 2, scales.data(), scales.size() * 2);
              }
            }
      ASSERT_TRUE(cpu->WriteBlock(b, block).ok());
      ASSERT_TRUE(gpu->WriteBlock(b, block).ok());
    }
    const std::vector<std::pair<int32_t, int32_t>> copies = {{0, 5}, {5, 1}};
    ASSERT_TRUE(cpu->CopyBlocks(copies).ok());
    ASSERT_TRUE(gpu->CopyBlocks(copies).ok());
    const std::vector<int32_t> shift = {1, 3, 1};  // a repeated block is rotated twice
    ASSERT_TRUE(cpu->ShiftKeys(shift, -21).ok());
    ASSERT_TRUE(gpu->ShiftKeys(shift, -21).ok());
    std::vector<uint8_t> x(spec.block_bytes()), y(spec.block_bytes());
    for (int b = 0; b < num_blocks; ++b) {
      ASSERT_TRUE(cpu->ReadBlock(b, x).ok());
      ASSERT_TRUE(gpu->ReadBlock(b, y).ok());
      EXPECT_TRUE(x == y) << KvDtypeName(dtype) << " block " << b;
    }
    EXPECT_EQ(gpu->ReadBlock(num_blocks, y).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(gpu->ShiftKeys(std::vector<int32_t>{num_blocks}, 1).code(), StatusCode::kInvalidArgument);
  }
}

TEST(CudaBackend, RejectsMalformedBatches) {
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  Harness h(*model, KvDtype::kF32, 4, 4, Cuda(*model, CudaWeightType::kF16));
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
  std::vector<float> small(3);
  EXPECT_EQ(h.backend->Forward(b, small).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(h.backend->Forward(b, logits).ok());
}

TEST(CudaBackend, ProfilerGetsDeviceTimesPerOperation) {
  // With a profiler set, steps run eagerly with CUDA events between operations and the
  // intervals land in the profiler's forward-pass categories.
  REQUIRE_CUDA_DEVICE();
  auto model = TinyModel();
  Harness h(*model, KvDtype::kF16, 16, 8, Cuda(*model, CudaWeightType::kF16));
  Profiler profiler;
  h.backend->SetProfiler(&profiler);
  const std::vector<int32_t> tokens = RandomTokens(20, model->config().vocab_size, 4);
  ASSERT_TRUE(h.cache->AllocateSlots(1, 20).has_value());
  std::vector<float> logits(model->config().vocab_size);
  ScheduledSeq s{1, tokens, 0, true};
  ASSERT_TRUE(h.runner->Execute(std::span(&s, 1), logits).ok());
  profiler.CountStep(1);
  const std::string report = profiler.Report();
  for (ProfileOp op : {ProfileOp::kEmbed, ProfileOp::kQkv, ProfileOp::kAttention, ProfileOp::kDown, ProfileOp::kLogits}) {
    const std::string zero = fmt::format("| {} | 0.0000 |", ProfileOpName(op));
    EXPECT_EQ(report.find(zero), std::string::npos) << report;
    EXPECT_NE(report.find(ProfileOpName(op)), std::string::npos);
  }
  EXPECT_EQ(static_cast<CudaBackend*>(h.backend.get())->stats().graph_replays, 0);
}

TEST(CudaBackend, PlansKvBlocksFromDeviceMemory) {
  REQUIRE_CUDA_DEVICE();
  CudaKvBudget budget;
  budget.gpu_memory_utilization = 0.5;
  auto blocks = PlanCudaKvBlocks(1 << 20, budget);
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  EXPECT_GT(*blocks, 0);
  budget.kv_cache_bytes = 64 << 20;
  EXPECT_EQ(*PlanCudaKvBlocks(1 << 20, budget), 64);
  auto bw = MeasureCudaCopyBandwidth(64 << 20);
  ASSERT_TRUE(bw.ok());
  EXPECT_GT(*bw, 1e11);  // any datacenter GPU copies faster than 100 GB/s
}

}  // namespace cuda_backend_test
}  // namespace kvserve
