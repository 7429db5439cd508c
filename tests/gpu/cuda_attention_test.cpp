// Paged attention on the GPU against a double-precision CPU computation over the same arena
// bytes (rows decoded with the reference codecs), for every KV dtype and mixed per-head
// dtypes, GQA group sizes 1..8, head dims 8..256 (including the non-vectorised layout), decode
// with and without split-K (empty splits, padding sequences) and chunked prefill with the
// causal mask. Tolerance: |gpu - ref| <= 1e-4 (outputs are averages of O(1) values); F16
// output adds one F16 rounding. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/kv_arena_util.h"

namespace kvserve {
namespace cuda_attention_test {

using testing::DeviceBuffer;
using testing::DeviceKvArena;
using testing::HostKvArena;
using testing::MakeSpec;
using testing::RandomNormal;

struct Shape {
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int group_size;
  int block_size;
};
const Shape kShapes[] = {
    {8, 2, 64, 64, 16},   // 1B-like GQA (n_rep 4)
    {4, 4, 128, 32, 16},  // MHA, 7B-like head
    {8, 1, 8, 8, 16},     // n_rep 8, tiny head (stories260K has head dim 8)
    {6, 3, 12, 4, 5},     // head dim not a multiple of 8: element-wise decode path
    {2, 1, 256, 128, 16}  // largest supported head
};

std::vector<KvSpec> Specs(const Shape& s) {
  std::vector<KvSpec> out;
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4}) {
    out.push_back(MakeSpec(2, s.num_kv_heads, s.head_dim, s.block_size, d, s.group_size));
  }
  out.push_back(MakeSpec(2, s.num_kv_heads, s.head_dim, s.block_size, KvDtype::kInt8, s.group_size, {{1, 0}},
                         KvDtype::kF16));
  return out;
}

constexpr int kLayer = 1;  // the tested layer (exercises the per-layer segment offsets)

// A batch over a filled arena: tokens of each sequence are its last q_count positions.
struct Batch {
  std::vector<int> ctx;      // per sequence: seq_len (0 = padding)
  std::vector<int> q_count;  // per sequence: query tokens
  std::vector<int32_t> positions, seq_lens, tables, seq_of_token;
  std::vector<int32_t> query_start;
  int max_blocks = 0;
  int num_blocks = 0;
};

Batch MakeBatch(std::vector<int> ctx, std::vector<int> q_count, int block_size, uint32_t seed) {
  Batch b;
  b.ctx = std::move(ctx);
  b.q_count = std::move(q_count);
  for (int c : b.ctx) b.max_blocks = std::max(b.max_blocks, (c + block_size - 1) / block_size);
  b.max_blocks = std::max(b.max_blocks, 1);
  for (int c : b.ctx) b.num_blocks += (c + block_size - 1) / block_size;
  b.num_blocks += 3;
  std::vector<int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  size_t next = 0;
  b.query_start.push_back(0);
  for (size_t s = 0; s < b.ctx.size(); ++s) {
    const int used = (b.ctx[s] + block_size - 1) / block_size;
    for (int j = 0; j < b.max_blocks; ++j) b.tables.push_back(j < used ? ids[next++] : -1);
    b.seq_lens.push_back(b.ctx[s]);
    for (int i = 0; i < b.q_count[s]; ++i) {
      b.positions.push_back(b.ctx[s] > 0 ? b.ctx[s] - b.q_count[s] + i : 0);
      b.seq_of_token.push_back(static_cast<int32_t>(s));
    }
    b.query_start.push_back(static_cast<int32_t>(b.positions.size()));
  }
  return b;
}

void FillArena(HostKvArena* arena, const Batch& b, uint32_t seed) {
  const KvSpec& s = arena->spec();
  for (size_t q = 0; q < b.ctx.size(); ++q) {
    for (int p = 0; p < b.ctx[q]; ++p) {
      const int block = b.tables[q * b.max_blocks + p / s.block_size()];
      for (int kind = 0; kind < 2; ++kind) {
        for (int h = 0; h < s.num_kv_heads(); ++h) {
          const std::vector<float> x = RandomNormal(s.head_dim(), seed++);
          arena->Encode(block, kLayer, kind, h, p % s.block_size(), x.data());
        }
      }
    }
  }
}

// out [T][num_heads * head_dim], double-precision softmax over the decoded rows.
std::vector<float> Reference(HostKvArena* arena, const Batch& b, const std::vector<float>& q, int64_t q_stride,
                             int num_heads) {
  const KvSpec& s = arena->spec();
  const int hd = s.head_dim();
  const int n_rep = num_heads / s.num_kv_heads();
  const int T = static_cast<int>(b.positions.size());
  std::vector<float> out(static_cast<size_t>(T) * num_heads * hd, 0.0f);
  std::vector<float> k(hd), v(hd);
  for (int t = 0; t < T; ++t) {
    const int seq = b.seq_of_token[t];
    const int ctx = std::min(b.positions[t] + 1, b.seq_lens[seq]);
    for (int h = 0; h < num_heads; ++h) {
      const int g = h / n_rep;
      std::vector<double> scores(ctx);
      double m = -INFINITY;
      for (int j = 0; j < ctx; ++j) {
        const int block = b.tables[static_cast<size_t>(seq) * b.max_blocks + j / s.block_size()];
        arena->Decode(block, kLayer, 0, g, j % s.block_size(), k.data());
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[t * q_stride + h * hd + d]) * k[d];
        scores[j] = dot;
        m = std::max(m, dot);
      }
      double sum = 0;
      std::vector<double> acc(hd, 0.0);
      for (int j = 0; j < ctx; ++j) {
        const double p = std::exp(scores[j] - m);
        sum += p;
        const int block = b.tables[static_cast<size_t>(seq) * b.max_blocks + j / s.block_size()];
        arena->Decode(block, kLayer, 1, g, j % s.block_size(), v.data());
        for (int d = 0; d < hd; ++d) acc[d] += p * v[d];
      }
      for (int d = 0; d < hd && ctx > 0; ++d) out[(static_cast<size_t>(t) * num_heads + h) * hd + d] = acc[d] / sum;
    }
  }
  return out;
}

struct RunConfig {
  bool decode;     // one token per sequence, optionally split
  int num_splits;  // decode only
  int q_tile;      // prefill only
  cuda::ActType out_type = cuda::ActType::kF32;
};

std::vector<float> RunGpu(const HostKvArena& arena, const Batch& b, const std::vector<float>& q, int64_t q_stride,
                          int num_heads, const RunConfig& rc) {
  const KvSpec& s = arena.spec();
  const int hd = s.head_dim();
  const int n_rep = num_heads / s.num_kv_heads();
  const int T = static_cast<int>(b.positions.size());
  const int S = static_cast<int>(b.ctx.size());
  std::vector<cuda::AttnWork> work;
  int partition = 0;
  if (rc.decode) {
    const int max_ctx = std::max(1, *std::max_element(b.ctx.begin(), b.ctx.end()));
    partition = ((max_ctx + rc.num_splits - 1) / rc.num_splits + cuda::kAttnTile - 1) / cuda::kAttnTile * cuda::kAttnTile;
    for (int seq = 0; seq < S; ++seq)
      for (int p = 0; p < rc.num_splits; ++p) work.push_back({seq, seq, 1, p});
  } else {
    for (int seq = 0; seq < S; ++seq)
      for (int q0 = b.query_start[seq]; q0 < b.query_start[seq + 1]; q0 += rc.q_tile)
        work.push_back({seq, q0, std::min(rc.q_tile, b.query_start[seq + 1] - q0), 0});
  }
  const int rows = rc.decode ? n_rep : rc.q_tile * n_rep;
  int optin = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_LE(cuda::AttentionSmemBytes(rows, hd), static_cast<size_t>(optin));
  EXPECT_EQ(cuda::SetAttentionSmemLimit(static_cast<size_t>(optin)), cudaSuccess);

  DeviceKvArena device(arena);
  DeviceBuffer<float> d_q(q);
  DeviceBuffer<int32_t> d_pos(b.positions), d_lens(b.seq_lens), d_tables(b.tables);
  DeviceBuffer<cuda::AttnWork> d_work(work);
  DeviceBuffer<uint8_t> d_out(static_cast<size_t>(T) * num_heads * hd * cuda::ActBytes(rc.out_type));
  const size_t part_rows = static_cast<size_t>(T) * num_heads * std::max(rc.num_splits, 1);
  DeviceBuffer<float> d_part_acc(part_rows * hd), d_part_ml(part_rows * 2);
  cuda::AttnArgs a;
  a.kv = device.View(kLayer);
  a.q = d_q.get();
  a.q_stride = q_stride;
  a.positions = d_pos.get();
  a.seq_lens = d_lens.get();
  a.block_tables = d_tables.get();
  a.max_blocks = b.max_blocks;
  a.work = d_work.get();
  a.num_work = static_cast<int>(work.size());
  a.num_heads = num_heads;
  a.max_rows = rows;
  a.partition = partition;
  a.num_splits = rc.decode ? rc.num_splits : 1;
  a.threads = rc.decode ? 128 : 256;
  a.out = d_out.get();
  a.out_type = rc.out_type;
  a.part_acc = d_part_acc.get();
  a.part_ml = d_part_ml.get();
  EXPECT_EQ(cuda::LaunchAttention(a, nullptr), cudaSuccess);
  if (a.num_splits > 1) {
    EXPECT_EQ(cuda::LaunchAttentionCombine(d_part_acc.get(), d_part_ml.get(), T, num_heads, hd, a.num_splits,
                                           d_out.get(), rc.out_type, nullptr),
              cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> bytes = d_out.Download();
  std::vector<float> out(static_cast<size_t>(T) * num_heads * hd);
  for (size_t i = 0; i < out.size(); ++i) {
    if (rc.out_type == cuda::ActType::kF32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = F16ToF32(h);
    }
  }
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f + rel * std::fabs(want[i])) << what << " element " << i;
  }
}

std::vector<float> MakeQueries(int T, int64_t q_stride, int head_dim, uint32_t seed) {
  // Scores of O(1): q ~ N(0, 2 / sqrt(head_dim)) (pre-scaled as the backend's RoPE leaves it).
  return RandomNormal(static_cast<size_t>(T) * q_stride, seed, 2.0f / std::sqrt(static_cast<float>(head_dim)));
}

TEST(CudaAttention, DecodeMatchesCpuForEveryDtypeWithAndWithoutSplits) {
  REQUIRE_CUDA_DEVICE();
  for (const Shape& shape : kShapes) {
    // Contexts: 1 key, a partial tile, several blocks, long enough for 4 splits; then a padding
    // sequence (seq_len 0) that must produce zeros.
    const Batch b = MakeBatch({1, 17, 300, 1000, 0}, {1, 1, 1, 1, 1}, shape.block_size, 11);
    const int64_t q_stride = static_cast<int64_t>(shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim;
    const std::vector<float> q = MakeQueries(static_cast<int>(b.positions.size()), q_stride, shape.head_dim, 12);
    for (const KvSpec& spec : Specs(shape)) {
      HostKvArena arena(spec, b.num_blocks);
      FillArena(&arena, b, 13);
      const std::vector<float> want = Reference(&arena, b, q, q_stride, shape.num_heads);
      const std::string what = spec.Describe() + " head_dim " + std::to_string(shape.head_dim) + " n_rep " +
                               std::to_string(shape.num_heads / shape.num_kv_heads);
      for (int splits : {1, 4}) {
        const auto got = RunGpu(arena, b, q, q_stride, shape.num_heads, {true, splits, 0});
        ExpectClose(got, want, 0.0f, what + " splits " + std::to_string(splits));
      }
    }
  }
}

TEST(CudaAttention, ChunkedPrefillMatchesCpuWithTheCausalMask) {
  REQUIRE_CUDA_DEVICE();
  for (const Shape& shape : kShapes) {
    // A fresh 45-token prompt, and a continuing chunk of 20 tokens at positions 30..49.
    const Batch b = MakeBatch({45, 50}, {45, 20}, shape.block_size, 21);
    const int64_t q_stride = static_cast<int64_t>(shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim;
    const std::vector<float> q = MakeQueries(static_cast<int>(b.positions.size()), q_stride, shape.head_dim, 22);
    const int n_rep = shape.num_heads / shape.num_kv_heads;
    const int q_tile = std::max(1, std::min(16, 32 / n_rep));
    for (const KvSpec& spec : Specs(shape)) {
      HostKvArena arena(spec, b.num_blocks);
      FillArena(&arena, b, 23);
      const std::vector<float> want = Reference(&arena, b, q, q_stride, shape.num_heads);
      const auto got = RunGpu(arena, b, q, q_stride, shape.num_heads, {false, 1, q_tile});
      ExpectClose(got, want, 0.0f, spec.Describe() + " head_dim " + std::to_string(shape.head_dim));
    }
  }
}

TEST(CudaAttention, HalfPrecisionOutputIsOneRoundingAway) {
  REQUIRE_CUDA_DEVICE();
  const Shape shape = kShapes[0];
  const Batch b = MakeBatch({200, 33}, {1, 1}, shape.block_size, 31);
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim;
  const std::vector<float> q = MakeQueries(2, q_stride, shape.head_dim, 32);
  const KvSpec spec = MakeSpec(2, shape.num_kv_heads, shape.head_dim, shape.block_size, KvDtype::kInt8, 64);
  HostKvArena arena(spec, b.num_blocks);
  FillArena(&arena, b, 33);
  const std::vector<float> want = Reference(&arena, b, q, q_stride, shape.num_heads);
  for (int splits : {1, 2}) {
    RunConfig rc{true, splits, 0, cuda::ActType::kF16};
    ExpectClose(RunGpu(arena, b, q, q_stride, shape.num_heads, rc), want, 1e-3f, "f16 out");
  }
}

}  // namespace cuda_attention_test
}  // namespace kvserve
