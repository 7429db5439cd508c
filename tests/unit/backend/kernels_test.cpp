// Every SIMD kernel table against the generic C++ table and the reference codecs.
#include "engine/backend/cpu/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_codec.h"
#include "common/fp16.h"
#include "tests/unit/backend/kernels_test_util.h"

namespace kvserve::cpu {
namespace kernels_test {

class KernelsTest : public ::testing::TestWithParam<std::string> {};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_P(KernelsTest, MatMulMatchesReferenceForEveryWeightType) {
  const KernelTable* table = KernelsFor(GetParam());
  ASSERT_NE(table, nullptr);
  // Odd row lengths; row counts that fill panels, leave a partial last panel, or span
  // several panel tiles; token counts covering every tile remainder.
  for (int64_t cols : {32, 64, 96, 172, 256, 1024}) {
    for (GgmlType type : kAllWeightTypes) {
      if (cols % GetGgmlTypeInfo(static_cast<uint32_t>(type))->block_values != 0) continue;
      const int64_t rows = cols == 1024 ? 77 : 13;
      EncodedMatrix m = Encode(type, Random(rows * cols, 1), rows, cols);
      for (int tokens : {1, 2, 3, 4, 5, 9}) {
        const std::vector<float> x = Random(static_cast<size_t>(tokens) * cols, 2);
        std::vector<float> y(static_cast<size_t>(tokens) * rows, -1.0f);
        const PackedMatrix packed(m.w);
        MatMulArgs a{&packed, x.data(), cols, tokens, y.data(), rows};
        table->matmul[WeightKind(type)](a, 0, packed.num_panels());
        const std::vector<double> ref = ReferenceMatMul(m.w, x, tokens);
        for (size_t i = 0; i < y.size(); ++i) {
          // f32 accumulation over `cols` terms of magnitude ~1.
          ASSERT_NEAR(y[i], ref[i], 1e-5 * cols) << GetParam() << " " << GgmlTypeName(type)
                                                 << " cols " << cols << " tokens " << tokens;
        }
      }
    }
  }
}

TEST_P(KernelsTest, MatMulReadsRowsGgmlQuantizedAsGgmlDecodesThem) {
  // tests/data/ggml_blocks: 3 rows of 512 values that ggml quantized, and ggml's decoding of
  // them. The product with the panels must match the double product with ggml's floats, and
  // the panels must take the bytes per weight kernels.h states.
  const KernelTable* table = KernelsFor(GetParam());
  struct Case {
    GgmlType type;
    const char* file;
    double bytes_per_weight;
  };
  const int rows = 3, cols = 512;
  for (const Case& c : {Case{GgmlType::kQ4_1, "q4_1", 1.25}, Case{GgmlType::kQ5_0, "q5_0", 1.0625},
                        Case{GgmlType::kQ5_1, "q5_1", 1.25}, Case{GgmlType::kQ2_K, "q2_K", 1.5},
                        Case{GgmlType::kQ3_K, "q3_K", 1.25}, Case{GgmlType::kIQ4_NL, "iq4_nl", 1.0625},
                        Case{GgmlType::kIQ4_XS, "iq4_xs", 1.25}}) {
    const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/data/ggml_blocks/";
    const std::string blocks = ReadFile(dir + c.file + ".blocks");
    const std::string decoded = ReadFile(dir + c.file + ".f32");
    ASSERT_EQ(decoded.size(), sizeof(float) * rows * cols) << c.file;
    WeightMatrix w;
    w.type = c.type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = *GgmlRowBytes(c.type, cols);
    ASSERT_EQ(blocks.size(), w.row_bytes * rows) << c.file;
    w.data = reinterpret_cast<const uint8_t*>(blocks.data());
    std::vector<float> values(rows * cols);
    std::memcpy(values.data(), decoded.data(), decoded.size());
    const PackedMatrix packed(w);
    EXPECT_EQ(packed.nbytes(), static_cast<size_t>(kPanelRows * cols * c.bytes_per_weight)) << c.file;
    for (int tokens : {1, 5}) {
      const std::vector<float> x = Random(static_cast<size_t>(tokens) * cols, 7);
      std::vector<float> y(static_cast<size_t>(tokens) * rows);
      table->matmul[WeightKind(c.type)](MatMulArgs{&packed, x.data(), cols, tokens, y.data(), rows}, 0,
                                        packed.num_panels());
      for (int t = 0; t < tokens; ++t) {
        for (int r = 0; r < rows; ++r) {
          double ref = 0, magnitude = 0;
          for (int k = 0; k < cols; ++k) {
            ref += static_cast<double>(values[r * cols + k]) * x[t * cols + k];
            magnitude += std::fabs(static_cast<double>(values[r * cols + k]) * x[t * cols + k]);
          }
          // f32 sums of `cols` terms: a few units of 2^-24 of the magnitude per term.
          ASSERT_NEAR(y[t * rows + r], ref, 1e-6 * magnitude + 1e-6) << GetParam() << " " << c.file;
        }
      }
    }
  }
}

TEST_P(KernelsTest, MatMulIsIndependentOfBatchComposition) {
  // A token's result must not depend on which other tokens share the step (isolation and
  // greedy determinism under continuous batching).
  const KernelTable* table = KernelsFor(GetParam());
  const int64_t rows = 70, cols = 256;
  for (GgmlType type : kAllWeightTypes) {
    EncodedMatrix m = Encode(type, Random(rows * cols, 3), rows, cols);
    const PackedMatrix packed(m.w);
    const std::vector<float> x = Random(7 * cols, 4);
    std::vector<float> all(7 * rows);
    table->matmul[WeightKind(type)](MatMulArgs{&packed, x.data(), cols, 7, all.data(), rows}, 0, packed.num_panels());
    for (int t = 0; t < 7; ++t) {
      std::vector<float> one(rows);
      table->matmul[WeightKind(type)](MatMulArgs{&packed, x.data() + t * cols, cols, 1, one.data(), rows}, 0,
                                      packed.num_panels());
      for (int r = 0; r < rows; ++r) ASSERT_EQ(one[r], all[t * rows + r]) << GgmlTypeName(type);
    }
  }
}

TEST_P(KernelsTest, KvDotAndAxpyMatchTheReferenceCodec) {
  const KernelTable* table = KernelsFor(GetParam());
  for (int head_dim : {8, 64, 128, 96}) {
    for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
      for (int n : {11, 16, 33}) {
        const size_t row_bytes = KvRowDataBytes(d, head_dim);
        std::vector<uint8_t> data(n * row_bytes);
        std::vector<float> decoded(n * head_dim);
        const std::vector<float> src = Random(n * head_dim, 5);
        for (int j = 0; j < n; ++j) {
          EncodeKvRow(d, &src[j * head_dim], head_dim, head_dim, &data[j * row_bytes], nullptr);
          DecodeKvRow(d, &data[j * row_bytes], nullptr, head_dim, head_dim, &decoded[j * head_dim]);
        }
        const std::vector<float> q = Random(head_dim, 6);
        const std::vector<float> p = Random(n, 7);
        const KvRows rows{data.data(), nullptr, n};
        std::vector<float> scores(n);
        table->kv_dot[static_cast<int>(d)](q.data(), rows, head_dim, scores.data());
        std::vector<float> acc(head_dim, 0.5f);
        table->kv_axpy[static_cast<int>(d)](p.data(), rows, head_dim, acc.data());
        for (int j = 0; j < n; ++j) {
          double ref = 0;
          for (int i = 0; i < head_dim; ++i) ref += static_cast<double>(q[i]) * decoded[j * head_dim + i];
          ASSERT_NEAR(scores[j], ref, 1e-4 * head_dim) << GetParam() << " " << KvDtypeName(d) << " hd " << head_dim;
        }
        for (int i = 0; i < head_dim; ++i) {
          double ref = 0.5;
          for (int j = 0; j < n; ++j) ref += static_cast<double>(p[j]) * decoded[j * head_dim + i];
          ASSERT_NEAR(acc[i], ref, 1e-4 * n) << GetParam() << " " << KvDtypeName(d) << " hd " << head_dim;
        }
      }
    }
  }
}

// Decoded values against the codec: the same fused multiply-add, so the same bits on the vector
// tables; the generic table multiplies and adds apart (one more rounding).
void ExpectDecodedLikeCodec(const std::string& isa, const float* got, const float* want, int count,
                            const std::string& what) {
  for (int i = 0; i < count; ++i) {
    if (isa == "generic") {
      ASSERT_NEAR(got[i], want[i], 1e-6 * (std::fabs(want[i]) + 1.0)) << what << " value " << i;
    } else {
      ASSERT_EQ(got[i], want[i]) << isa << " " << what << " value " << i;
    }
  }
}

TEST_P(KernelsTest, KvDecodeGivesTheCodecsValues) {
  const KernelTable* table = KernelsFor(GetParam());
  for (int head_dim : {8, 64, 128, 256}) {
    for (int group : {8, 32, 64, 128}) {
      if (group > head_dim || head_dim % group) continue;
      for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) {
        const int n = 11;
        const size_t row_bytes = KvRowDataBytes(d, head_dim);
        std::vector<uint8_t> data(n * row_bytes);
        const int params = kKvParamsPerGroup * head_dim / group;
        std::vector<uint16_t> scales(n * params);
        std::vector<float> want(n * head_dim), got(n * head_dim);
        std::vector<float> src = Random(n * head_dim, 5);
        // Per-channel offsets, as RoPE'd keys have: the groups' biases are far from zero.
        for (size_t i = 0; i < src.size(); ++i) src[i] += 0.3f * static_cast<float>(i % head_dim % 5) - 0.5f;
        for (int j = 0; j < n; ++j) {
          EncodeKvRow(d, &src[j * head_dim], head_dim, group, &data[j * row_bytes], &scales[j * params]);
          DecodeKvRow(d, &data[j * row_bytes], &scales[j * params], head_dim, group, &want[j * head_dim]);
        }
        const KvDecodeFn decode = d == KvDtype::kInt8 ? table->kv_decode_int8 : table->kv_decode_int4;
        decode(KvRows{data.data(), scales.data(), n}, head_dim, group, got.data());
        ExpectDecodedLikeCodec(GetParam(), got.data(), want.data(), n * head_dim,
                               std::string(KvDtypeName(d)) + " hd " + std::to_string(head_dim) + " group " +
                                   std::to_string(group));
      }
    }
  }
}

// Quantized rows read in place give the bits of KvDecode followed by the F32 row kernels (so
// a decode step and a prefill tile, which decodes blocks first, agree). Head dims 64 and 128 in
// one group have in-place code on every table; other shapes are decoded first by the backend.
TEST_P(KernelsTest, KvInPlaceDotAndAxpyAreDecodeThenF32BitForBit) {
  const KernelTable* table = KernelsFor(GetParam());
  EXPECT_FALSE(table->kv_in_place(64, 32));
  EXPECT_FALSE(table->kv_in_place(96, 96));
  for (int head_dim : {64, 128}) {
    const int group = head_dim;
    ASSERT_TRUE(table->kv_in_place(head_dim, group)) << GetParam();
    for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) {
      for (int n : {16, 11, 1}) {
        const size_t row_bytes = KvRowDataBytes(d, head_dim);
        const int params = kKvParamsPerGroup * head_dim / group;
        std::vector<uint8_t> data(n * row_bytes);
        std::vector<uint16_t> scales(n * params);
        std::vector<float> src = Random(n * head_dim, 12);
        for (size_t i = 0; i < src.size(); ++i) src[i] += 0.3f * static_cast<float>(i % head_dim % 5) - 0.5f;
        for (int j = 0; j < n; ++j) {
          EncodeKvRow(d, &src[j * head_dim], head_dim, group, &data[j * row_bytes], &scales[j * params]);
        }
        const KvRows rows{data.data(), scales.data(), n};
        std::vector<float> decoded(n * head_dim);
        (d == KvDtype::kInt8 ? table->kv_decode_int8 : table->kv_decode_int4)(rows, head_dim, group, decoded.data());
        const KvRows f32{reinterpret_cast<const uint8_t*>(decoded.data()), nullptr, n};
        const std::vector<float> q = Random(head_dim, 13), p = Random(n, 14);
        std::vector<float> want(n), got(n), want_acc(head_dim, 0.25f), got_acc(head_dim, 0.25f);
        table->kv_dot[static_cast<int>(KvDtype::kF32)](q.data(), f32, head_dim, want.data());
        table->kv_axpy[static_cast<int>(KvDtype::kF32)](p.data(), f32, head_dim, want_acc.data());
        (d == KvDtype::kInt8 ? table->kv_dot_int8 : table->kv_dot_int4)(q.data(), rows, head_dim, group, got.data());
        (d == KvDtype::kInt8 ? table->kv_axpy_int8 : table->kv_axpy_int4)(p.data(), rows, head_dim, group,
                                                                            got_acc.data());
        const std::string what = std::string(GetParam()) + " " + std::string(KvDtypeName(d)) + " hd " +
                                 std::to_string(head_dim) + " group " + std::to_string(group) + " n " +
                                 std::to_string(n);
        EXPECT_EQ(got, want) << what;
        EXPECT_EQ(got_acc, want_acc) << what;
      }
    }
  }
}

// INT4C keys of a full block: decoded per channel as the codec does, on every table.
TEST_P(KernelsTest, KvDecodeChannelGivesTheCodecsValues) {
  const KernelTable* table = KernelsFor(GetParam());
  for (int head_dim : {8, 64, 128}) {
    for (int group : {8, 64, 128}) {
      if (group > head_dim || head_dim % group) continue;
      for (int n : {16, 5}) {
        const size_t row_bytes = KvRowDataBytes(KvDtype::kInt4C, head_dim);
        std::vector<float> src = Random(n * head_dim, 9);
        for (size_t i = 0; i < src.size(); ++i) src[i] += 0.7f * static_cast<float>(i % head_dim % 7) - 1.5f;
        std::vector<uint8_t> data(n * row_bytes);
        std::vector<uint16_t> params(kKvParamsPerGroup * head_dim);
        EncodeKvKeysPerChannel(src.data(), n, head_dim, group, data.data(), params.data());
        std::vector<float> want(n * head_dim), got(n * head_dim);
        for (int j = 0; j < n; ++j) {
          DecodeKvKeyRowPerChannel(&data[j * row_bytes], params.data(), head_dim, group, &want[j * head_dim]);
        }
        table->kv_decode_channel(data.data(), n, params.data(), head_dim, group, got.data());
        ExpectDecodedLikeCodec(GetParam(), got.data(), want.data(), n * head_dim,
                               "hd " + std::to_string(head_dim) + " group " + std::to_string(group));
      }
    }
  }
}

TEST_P(KernelsTest, ExpSubSumMatchesExpfAndZeroesMaskedScores) {
  const KernelTable* table = KernelsFor(GetParam());
  for (int n : {1, 7, 16, 17, 40}) {
    std::vector<float> s = Random(n, 8);
    for (float& x : s) x *= 30.0f;  // down to e^-100: underflow included
    if (n > 1) s[n / 2] = -INFINITY;  // a masked key
    const float max = *std::max_element(s.begin(), s.end());
    std::vector<float> got = s;
    const float sum = table->exp_sub_sum(got.data(), n, max);
    double want_sum = 0;
    for (int j = 0; j < n; ++j) {
      const double want = std::exp(static_cast<double>(s[j] - max));  // of the F32 difference
      want_sum += want;
      if (s[j] - max < -87.0f) {
        ASSERT_EQ(got[j], 0.0f) << GetParam() << " j " << j;  // exactly: masked keys add nothing
      } else {
        // Within 1e-6 relative: a few ulp.
        ASSERT_NEAR(got[j], want, 1e-6 * want) << GetParam() << " x " << s[j] - max;
      }
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << GetParam();
    EXPECT_EQ(table->max(s.data(), n), max) << GetParam() << " n " << n;
  }
  const float all_masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  EXPECT_EQ(table->max(all_masked, 3), -INFINITY);
}

TEST_P(KernelsTest, SiluMulMatchesTheDoubleFormula) {
  const KernelTable* table = KernelsFor(GetParam());
  for (int n : {1, 7, 16, 37, 300}) {
    std::vector<float> gate = Random(n, 10), up = Random(n, 11);
    for (float& g : gate) g *= 40.0f;  // e^-40 .. e^40: both branches, far from 0
    if (n > 2) gate[1] = 0.0f, gate[2] = -0.0f;
    const std::vector<float> g0 = gate;
    table->silu_mul(gate.data(), up.data(), n);
    for (int i = 0; i < n; ++i) {
      const double g = g0[i], want = g / (1.0 + std::exp(-g)) * up[i];
      // Within 2e-6 relative (the exponential's 1e-6 and a few roundings).
      ASSERT_NEAR(gate[i], want, 2e-6 * std::fabs(want) + 1e-30) << GetParam() << " g " << g;
    }
  }
  float nan_gate = NAN, inf_gate = INFINITY, one = 1.0f;
  table->silu_mul(&nan_gate, &one, 1);
  table->silu_mul(&inf_gate, &one, 1);
  EXPECT_TRUE(std::isnan(nan_gate));
  EXPECT_EQ(inf_gate, INFINITY);
}

TEST_P(KernelsTest, ToF16GivesF32ToF16sBits) {
  const KernelTable* table = KernelsFor(GetParam());
  std::vector<float> x = Random(1000, 9);
  for (float& v : x) v *= 70000.0f;  // past F16's largest (65504): overflow to infinity included
  // Ties at both ends of F16's range, subnormal results, signed zeros, infinities.
  const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-26f, 1e-10f,
                           -0.0f, 0.0f, 65504.0f, 65520.0f, 65519.0f, INFINITY, -INFINITY, -0x1.8p-20f};
  x.insert(x.begin(), std::begin(special), std::end(special));
  x.push_back(NAN);
  for (int n : {static_cast<int>(x.size()), 13, 5}) {  // full vectors and tails
    std::vector<uint16_t> got(n);
    table->to_f16(x.data(), n, got.data());
    for (int i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(F16ToF32(got[i]))) << GetParam();
      } else {
        ASSERT_EQ(got[i], F32ToF16(x[i])) << GetParam() << " x " << x[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, KernelsTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace kernels_test
}  // namespace kvserve::cpu
