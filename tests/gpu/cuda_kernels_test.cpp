// Each row/elementwise CUDA kernel against its CPU reference (the CPU backend's arithmetic and
// the reference KV codecs). Tolerances, where not exact, are stated per test. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cache/kv_codec.h"
#include "common/fp16.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/model/model_config.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/kv_arena_util.h"

namespace kvserve {
namespace cuda_kernels_test {

using cuda::ActType;
using testing::ActName;
using testing::DecodeAct;
using testing::DeviceBuffer;
using testing::EncodeAct;
using testing::DeviceKvArena;
using testing::HostKvArena;
using testing::MakeSpec;
using testing::RandomNormal;

constexpr ActType kActTypes[] = {ActType::kF32, ActType::kF16, ActType::kBF16};

// Relative tolerance of one rounding to the type, doubled (a last-bit difference before the
// rounding may move it by one unit).
float RoundingTolerance(ActType t) { return t == ActType::kF32 ? 1e-6f : t == ActType::kF16 ? 1.5e-3f : 1e-2f; }

TEST(CudaKernels, EmbeddingGathersRowsExactly) {
  REQUIRE_CUDA_DEVICE();
  const int vocab = 50, dim = 72;
  const std::vector<int32_t> tokens = {3, 0, 49, 3, 17};
  const std::vector<float> table = RandomNormal(static_cast<size_t>(vocab) * dim, 1);
  for (ActType t : kActTypes) {
    const std::vector<uint8_t> encoded = EncodeAct(table, t);
    const std::vector<float> decoded = DecodeAct(encoded, t);
    DeviceBuffer<uint8_t> d_table(encoded);
    DeviceBuffer<int32_t> d_tokens(tokens);
    DeviceBuffer<float> d_x(tokens.size() * dim);
    ASSERT_CUDA_OK(cuda::LaunchEmbedding(d_table.get(), t, d_tokens.get(), static_cast<int>(tokens.size()), dim,
                                         d_x.get(), nullptr));
    const std::vector<float> x = d_x.Download();
    for (size_t i = 0; i < tokens.size(); ++i) {
      for (int d = 0; d < dim; ++d) {
        ASSERT_EQ(x[i * dim + d], decoded[static_cast<size_t>(tokens[i]) * dim + d]) << ActName(t);
      }
    }
  }
}

// The CPU backend's RMSNorm: sum of squares in double, scale rounded to float.
std::vector<float> ReferenceRmsNorm(const std::vector<float>& x, const std::vector<int32_t>& rows, int dim,
                                    const std::vector<float>& w, float eps) {
  std::vector<float> out(rows.size() * dim);
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* xr = &x[static_cast<size_t>(rows[r]) * dim];
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / dim + eps));
    for (int i = 0; i < dim; ++i) out[r * dim + i] = xr[i] * scale * w[i];
  }
  return out;
}

TEST(CudaKernels, RmsNormMatchesCpuWithinOneRounding) {
  // Tolerance: |gpu - ref| <= tol(type) * |ref| + 1e-7 with tol 1e-6 (f32), 1.5e-3 (f16),
  // 1e-2 (bf16): the double sums differ only in order.
  REQUIRE_CUDA_DEVICE();
  const int rows = 5, dim = 1000;
  const float eps = 1e-5f;
  std::vector<float> x = RandomNormal(static_cast<size_t>(rows) * dim, 2, 3.0f);
  std::vector<float> w = RandomNormal(dim, 3, 0.1f);
  for (float& v : w) v += 1.0f;
  DeviceBuffer<float> d_x(x), d_w(w);
  for (const std::vector<int32_t>& gather : {std::vector<int32_t>{}, std::vector<int32_t>{4, 0, 2}}) {
    std::vector<int32_t> src = gather;
    if (src.empty()) src = {0, 1, 2, 3, 4};
    const std::vector<float> want = ReferenceRmsNorm(x, src, dim, w, eps);
    DeviceBuffer<int32_t> d_rows(gather);
    for (ActType t : kActTypes) {
      DeviceBuffer<uint8_t> d_out(src.size() * dim * cuda::ActBytes(t));
      ASSERT_CUDA_OK(cuda::LaunchRmsNorm(d_x.get(), gather.empty() ? nullptr : d_rows.get(),
                                         static_cast<int>(src.size()), dim, d_w.get(), eps, d_out.get(), t, nullptr));
      const std::vector<float> got = DecodeAct(d_out.Download(), t);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], RoundingTolerance(t) * std::fabs(want[i]) + 1e-7f) << ActName(t) << " " << i;
      }
    }
  }
}

// The CPU backend's ApplyRope for one token row.
void ReferenceRope(float* row, int pos, int heads, int kv_heads, int head_dim, int rope_dim, bool neox,
                   const std::vector<float>& cos_sin, float q_scale) {
  const int half = rope_dim / 2;
  const float* cs = &cos_sin[static_cast<size_t>(pos) * half * 2];
  auto rotate = [&](float* head) {
    for (int i = 0; i < half; ++i) {
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + half : 2 * i + 1;
      const float x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
      head[i1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
    }
  };
  for (int h = 0; h < heads; ++h) {
    rotate(row + h * head_dim);
    for (int d = 0; d < head_dim; ++d) row[h * head_dim + d] *= q_scale;
  }
  for (int h = 0; h < kv_heads; ++h) rotate(row + (heads + h) * head_dim);
}

TEST(CudaKernels, RopeMatchesCpuForBothLayoutsPartialRotationAndLongPositions) {
  // Positions below the table are bit-exact by construction (same table, explicit rounding);
  // beyond it the device computes cos/sin in double: tolerance 2e-6 * (1 + |x|).
  REQUIRE_CUDA_DEVICE();
  const int heads = 4, kv_heads = 2, head_dim = 16;
  const std::vector<int32_t> positions = {0, 1, 5, 15, 16, 39, 1000};
  const int T = static_cast<int>(positions.size());
  const int table_positions = 16;
  const int64_t stride = (heads + 2 * kv_heads) * head_dim + 3;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  struct Case {
    bool neox;
    int rope_dim;
  };
  for (Case c : {Case{false, 16}, Case{true, 16}, Case{false, 8}, Case{true, 12}}) {
    const std::vector<double> inv_freq = RopeInverseFrequencies(10000.0, c.rope_dim);
    std::vector<float> cos_sin;
    cuda::BuildRopeTables(inv_freq, 0.5, 1001, &cos_sin);
    const std::vector<float> qkv = RandomNormal(static_cast<size_t>(T) * stride, 4);
    std::vector<float> want = qkv;
    for (int t = 0; t < T; ++t) {
      ReferenceRope(&want[t * stride], positions[t], heads, kv_heads, head_dim, c.rope_dim, c.neox, cos_sin, q_scale);
    }
    DeviceBuffer<float> d_qkv(qkv);
    DeviceBuffer<int32_t> d_pos(positions);
    DeviceBuffer<float> d_cs(std::vector<float>(cos_sin.begin(), cos_sin.begin() + table_positions * c.rope_dim));
    DeviceBuffer<double> d_inv(inv_freq);
    cuda::RopeArgs a;
    a.qkv = d_qkv.get();
    a.stride = stride;
    a.num_tokens = T;
    a.positions = d_pos.get();
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.rope_dim = c.rope_dim;
    a.neox = c.neox;
    a.cos_sin = d_cs.get();
    a.table_positions = table_positions;
    a.inv_freq = d_inv.get();
    a.freq_scale = 0.5;
    a.q_scale = q_scale;
    ASSERT_CUDA_OK(cuda::LaunchRope(a, nullptr));
    const std::vector<float> got = d_qkv.Download();
    for (int t = 0; t < T; ++t) {
      for (int64_t i = 0; i < stride; ++i) {
        const float w = want[t * stride + i];
        if (positions[t] < table_positions || i >= (heads + kv_heads) * head_dim) {
          ASSERT_EQ(got[t * stride + i], w) << "neox " << c.neox << " rope_dim " << c.rope_dim << " t " << t << " i " << i;
        } else {
          ASSERT_NEAR(got[t * stride + i], w, 2e-6f * (1.0f + std::fabs(w))) << "t " << t << " i " << i;
        }
      }
    }
  }
}

TEST(CudaKernels, SwiGluAndBiasMatchCpu) {
  // SwiGLU: expf vs std::exp differ by <= 2 ulp: tolerance 1e-5 relative (+ one rounding to
  // the output type). Bias: exact.
  REQUIRE_CUDA_DEVICE();
  const int T = 3, ffn = 1000;
  const std::vector<float> gu = RandomNormal(static_cast<size_t>(T) * 2 * ffn, 5, 4.0f);
  std::vector<float> want(static_cast<size_t>(T) * ffn);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < ffn; ++i) {
      const float g = gu[t * 2 * ffn + i];
      want[t * ffn + i] = g / (1.0f + std::exp(-g)) * gu[t * 2 * ffn + ffn + i];
    }
  }
  DeviceBuffer<float> d_gu(gu);
  for (ActType t : kActTypes) {
    DeviceBuffer<uint8_t> d_out(want.size() * cuda::ActBytes(t));
    ASSERT_CUDA_OK(cuda::LaunchSwiGlu(d_gu.get(), T, ffn, d_out.get(), t, nullptr));
    const std::vector<float> got = DecodeAct(d_out.Download(), t);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], (1e-5f + RoundingTolerance(t)) * std::fabs(want[i]) + 1e-7f) << ActName(t);
    }
  }

  const int rows = 4, cols = 37, stride = 50;
  const std::vector<float> x = RandomNormal(static_cast<size_t>(rows) * stride, 6);
  const std::vector<float> bias = RandomNormal(cols, 7);
  DeviceBuffer<float> d_x(x), d_bias(bias);
  ASSERT_CUDA_OK(cuda::LaunchAddBias(d_x.get(), stride, rows, cols, d_bias.get(), nullptr));
  const std::vector<float> got = d_x.Download();
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < stride; ++c) {
      ASSERT_EQ(got[r * stride + c], x[r * stride + c] + (c < cols ? bias[c] : 0.0f));
    }
  }
}

struct KvShape {
  int head_dim;
  int group_size;
  int block_size;
};
// vec8 layouts, small groups, head_dim 12 (not a multiple of 8), head_dim 6 with INT4 rows of
// 3 bytes (odd scale offsets), odd block size.
const KvShape kKvShapes[] = {{64, 64, 16}, {128, 32, 16}, {8, 8, 16}, {12, 4, 5}, {6, 2, 3}};

std::vector<KvSpec> SpecsFor(const KvShape& s, int layers, int kv_heads) {
  std::vector<KvSpec> specs;
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4}) {
    specs.push_back(MakeSpec(layers, kv_heads, s.head_dim, s.block_size, d, s.group_size));
  }
  // Layered precision: INT8 by default, layer 1 head 0 and all of layer 0 in INT4.
  specs.push_back(MakeSpec(layers, kv_heads, s.head_dim, s.block_size, KvDtype::kInt8, s.group_size,
                           {{1, 0}, {0, -1}}, KvDtype::kInt4));
  specs.push_back(MakeSpec(layers, kv_heads, s.head_dim, s.block_size, KvDtype::kInt4, s.group_size, {{1, 1}},
                           KvDtype::kF16));
  return specs;
}

TEST(CudaKernels, AppendQuantizeWritesTheReferenceCodecBytesExactly) {
  // Exact: every byte of the arena (data, f16 scales, untouched padding) equals what
  // EncodeKvRow writes, for F32/F16/BF16/INT8/INT4 and mixed per-(layer, head) dtypes.
  REQUIRE_CUDA_DEVICE();
  const int layers = 2, kv_heads = 3, num_blocks = 6, T = 11;
  for (const KvShape& shape : kKvShapes) {
    for (const KvSpec& spec : SpecsFor(shape, layers, kv_heads)) {
      const int hd = spec.head_dim();
      const int64_t stride = static_cast<int64_t>(kv_heads) * hd + 5;
      // Distinct slots, one padding row (-1).
      std::vector<int64_t> slots;
      for (int t = 0; t < T; ++t) slots.push_back((static_cast<int64_t>(t) * 7 + 3) % (num_blocks * shape.block_size));
      slots[4] = -1;
      HostKvArena want(spec, num_blocks);
      DeviceKvArena device(want);
      for (int l = 0; l < layers; ++l) {
        std::vector<float> k = RandomNormal(static_cast<size_t>(T) * stride, 100 + l, 2.0f);
        std::vector<float> v = RandomNormal(static_cast<size_t>(T) * stride, 200 + l, 2.0f);
        for (int d = 0; d < hd; ++d) {
          k[0 * stride + d] = 0.0f;                                  // zero row: scale 0, bias 0
          // INT8 ties: groups span [-100, 155], so scale 1 and bias 28, and x - 28 ends in .5.
          const int i = d % spec.group_size();
          k[1 * stride + d] = i == 0 ? 155.0f : (i == 1 ? -100.0f : 28.0f + (d % 7 - 3) + 0.5f);
          v[2 * stride + hd + d] = 1e-3f * ((d % 5) - 2);            // subnormal f16 scales and biases
          v[3 * stride + d] = 3e4f * ((d % 3) - 1);                  // near the f16 range
        }
        for (int t = 0; t < T; ++t) {
          if (slots[t] < 0) continue;
          const int block = static_cast<int>(slots[t] / shape.block_size);
          const int row = static_cast<int>(slots[t] % shape.block_size);
          for (int h = 0; h < kv_heads; ++h) {
            want.Encode(block, l, 0, h, row, &k[t * stride + h * hd]);
            want.Encode(block, l, 1, h, row, &v[t * stride + h * hd]);
          }
        }
        DeviceBuffer<float> d_k(k), d_v(v);
        DeviceBuffer<int64_t> d_slots(slots);
        ASSERT_CUDA_OK(cuda::LaunchStoreKv(device.View(l), d_k.get(), d_v.get(), stride, T, d_slots.get(), nullptr));
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
      }
      const std::vector<uint8_t> got = device.Download();
      ASSERT_EQ(got.size(), want.bytes().size());
      size_t first = got.size();
      for (size_t i = 0; i < got.size() && first == got.size(); ++i) first = got[i] != want.bytes()[i] ? i : first;
      EXPECT_EQ(first, got.size()) << spec.Describe() << " head_dim " << hd << ": first differing byte " << first
                                   << " of block " << first / spec.block_bytes();
    }
  }
}

TEST(CudaKernels, ShiftKeysReRotatesAndReEncodesExactlyAsTheCpu) {
  // Exact: decode, rotate with explicitly rounded products and re-encode, as CpuBackend::ShiftKeys.
  REQUIRE_CUDA_DEVICE();
  const int layers = 2, kv_heads = 2, num_blocks = 5;
  const std::vector<int32_t> blocks = {3, 0, 4};
  const int delta = -37;
  for (const KvShape& shape : kKvShapes) {
    for (bool neox : {false, true}) {
      for (const KvSpec& spec : SpecsFor(shape, layers, kv_heads)) {
        const int hd = spec.head_dim();
        const int rope_dim = neox ? hd : (hd / 4) * 2;  // partial rotation for the normal layout
        HostKvArena want(spec, num_blocks);
        uint32_t seed = 1;
        for (int b = 0; b < num_blocks; ++b)
          for (int l = 0; l < layers; ++l)
            for (int kind = 0; kind < 2; ++kind)
              for (int h = 0; h < kv_heads; ++h)
                for (int r = 0; r < spec.block_size(); ++r) {
                  const std::vector<float> x = RandomNormal(hd, seed++);
                  want.Encode(b, l, kind, h, r, x.data());
                }
        DeviceKvArena device(want);
        const std::vector<double> inv_freq = RopeInverseFrequencies(10000.0, rope_dim);
        std::vector<float> cos_sin(rope_dim);
        for (int i = 0; i < rope_dim / 2; ++i) {
          const double theta = delta * 1.0 * inv_freq[i];
          cos_sin[2 * i] = static_cast<float>(std::cos(theta));
          cos_sin[2 * i + 1] = static_cast<float>(std::sin(theta));
        }
        std::vector<float> row(hd);
        for (int32_t b : blocks)
          for (int l = 0; l < layers; ++l)
            for (int h = 0; h < kv_heads; ++h)
              for (int r = 0; r < spec.block_size(); ++r) {
                want.Decode(b, l, 0, h, r, row.data());
                for (int i = 0; i < rope_dim / 2; ++i) {
                  const int i0 = neox ? i : 2 * i;
                  const int i1 = neox ? i + rope_dim / 2 : 2 * i + 1;
                  const float x0 = row[i0], x1 = row[i1];
                  row[i0] = x0 * cos_sin[2 * i] - x1 * cos_sin[2 * i + 1];
                  row[i1] = x0 * cos_sin[2 * i + 1] + x1 * cos_sin[2 * i];
                }
                want.Encode(b, l, 0, h, r, row.data());
              }
        DeviceBuffer<int32_t> d_blocks(blocks);
        DeviceBuffer<float> d_cs(cos_sin);
        cuda::ShiftKeysArgs a;
        a.arena = device.arena();
        a.block_bytes = spec.block_bytes();
        a.block_size = spec.block_size();
        a.head_dim = hd;
        a.group_size = spec.group_size();
        a.num_layers = layers;
        a.num_kv_heads = kv_heads;
        a.seg_offsets = device.seg_offsets();
        a.dtypes = device.dtypes();
        a.blocks = d_blocks.get();
        a.num_blocks = static_cast<int>(blocks.size());
        a.cos_sin = d_cs.get();
        a.rope_dim = rope_dim;
        a.neox = neox;
        ASSERT_CUDA_OK(cuda::LaunchShiftKeys(a, nullptr));
        EXPECT_TRUE(device.Download() == want.bytes()) << spec.Describe() << " head_dim " << hd << " neox " << neox;
      }
    }
  }
}

TEST(CudaKernels, RandomWeightsHaveTheRequestedMomentsAndCopyIsExact) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 1 << 20;
  DeviceBuffer<float> d(n);
  ASSERT_CUDA_OK(cuda::LaunchFillNormal(d.get(), ActType::kF32, n, 42, 0.02f, nullptr));
  const std::vector<float> v = d.Download();
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += static_cast<double>(x) * x;
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.01);
  DeviceBuffer<float> copy(n);
  ASSERT_CUDA_OK(cuda::LaunchCopy16(d.get(), copy.get(), n / 4, nullptr));
  EXPECT_TRUE(copy.Download() == v);
}

}  // namespace cuda_kernels_test
}  // namespace kvserve
