// The integer-dot kernels (ComputeDtype kInt8): the activations' quantization, every table and
// quantized type against a double product of the decoded weights with the quantized
// activations, the bound the activations' rounding puts on the distance to the F32 product,
// and results that do not depend on the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu/kernels.h"
#include "tests/unit/backend/kernels_test_util.h"

namespace kvserve::cpu {
namespace kernels_int8_test {

class Int8KernelsTest : public ::testing::TestWithParam<std::string> {};

// Every quantized type the kernels read.
std::vector<GgmlType> QuantizedTypes() {
  std::vector<GgmlType> out;
  for (GgmlType t : kAllWeightTypes) {
    if (DotKind(t) >= 0) out.push_back(t);
  }
  return out;
}

class QuantizedActivationsTest : public ::testing::TestWithParam<int> {};

TEST_P(QuantizedActivationsTest, ThreadsGiveTheSameBits) {
  const int block = GetParam(), tokens = 64;
  const int64_t cols = 1024;  // 64 x 1024 values: enough for Quantize to use its threads
  const std::vector<float> x = Random(tokens * cols, 5);
  QuantizedActivations one, two;
  one.Quantize(x.data(), cols, tokens, cols, block);
  two.Quantize(x.data(), cols, tokens, cols, block, 2);
  for (int t = 0; t < tokens; ++t) {
    ASSERT_EQ(std::memcmp(one.q(t), two.q(t), cols), 0) << t;
    ASSERT_EQ(std::memcmp(one.d(t), two.d(t), cols / block * sizeof(float)), 0) << t;
    ASSERT_EQ(std::memcmp(one.sums(t), two.sums(t), cols / 16 * sizeof(int32_t)), 0) << t;
  }
}

TEST_P(QuantizedActivationsTest, RoundsEachBlockToItsScale) {
  const int block = GetParam();
  const int64_t cols = 3 * block;
  std::vector<float> x = Random(2 * cols, 3);
  for (int j = block; j < 2 * block; ++j) x[j] = 0.0f;                // token 0, block 1: all zero
  x[cols + 2 * block + 6] = std::numeric_limits<float>::quiet_NaN();  // token 1, block 2: a NaN
  x[cols + 5] = 1e-42f;                                               // a subnormal beside normal values
  x[2 * block + 3] = -9.0f;  // token 0, block 2: the largest magnitude twice, the first negative
  x[2 * block + 9] = 9.0f;   // (Q8_K divides by the first: it maps to -127)
  QuantizedActivations xq;
  xq.Quantize(x.data(), cols, 2, cols, block);
  ASSERT_EQ(xq.block(), block);
  for (int t = 0; t < 2; ++t) {
    for (int b = 0; b < 3; ++b) {
      const float d = xq.d(t)[b];
      std::vector<int32_t> sums(block / 16);
      int at = 0;  // the block's value of largest magnitude
      for (int j = 0; j < block; ++j) {
        const int k = block * b + j;
        const int q = xq.q(t)[k];
        sums[j / 16] += q;
        if (std::fabs(x[t * cols + k]) > std::fabs(x[t * cols + block * b + at])) at = j;
        ASSERT_LE(std::abs(q), 127);
        if (t == 1 && b == 2) {
          ASSERT_EQ(q, 0);
        } else {
          ASSERT_LE(std::fabs(q * d - x[t * cols + k]), 0.5001f * std::fabs(d)) << t << " " << k;
        }
      }
      for (int s = 0; s < block / 16; ++s) EXPECT_EQ(xq.sums(t)[block / 16 * b + s], sums[s]);
      if (t == 0 && b == 1) {
        EXPECT_EQ(d, 0.0f);
      } else if (t == 1 && b == 2) {
        EXPECT_TRUE(std::isnan(d));
      } else {
        // The largest magnitude maps to +-127 exactly: 127 for block 32 (Q8_0), -127 for 256 (Q8_K).
        const int q = xq.q(t)[block * b + at];
        EXPECT_EQ(block == 32 ? q * (x[t * cols + block * b + at] > 0 ? 1 : -1) : q, block == 32 ? 127 : -127);
      }
    }
  }
}

// Every table's quantize_block (vectorized for its ISA) gives the generic table's bits: random
// blocks, an all-zero one, one with a NaN, one with an infinity, and a tie of +m and -m.
TEST_P(QuantizedActivationsTest, EveryTableQuantizesBlocksToTheGenericBits) {
  const int block = GetParam(), blocks = 40;
  std::vector<float> x = Random(static_cast<size_t>(blocks) * block, 11);
  std::fill(x.begin(), x.begin() + block, 0.0f);
  x[block + 7] = std::numeric_limits<float>::quiet_NaN();
  x[2 * block + 1] = -std::numeric_limits<float>::infinity();
  x[3 * block + 2] = 4.0f, x[3 * block + 5] = -4.0f;
  x[4 * block + 3] = 1e-42f;
  const KernelTable& generic = *KernelsFor("generic");
  for (const char* isa : {"avx2", "avxvnni", "avx512", "avx512bf16"}) {
    const KernelTable* table = KernelsFor(isa);
    if (table == nullptr) continue;  // not on this CPU
    for (int b = 0; b < blocks; ++b) {
      const float* src = x.data() + static_cast<size_t>(b) * block;
      std::vector<int8_t> q0(block), q1(block);
      std::vector<int32_t> s0(block / 16), s1(block / 16);
      float d0 = 0.0f, d1 = 0.0f;
      generic.quantize_block(src, block, q0.data(), &d0, s0.data());
      table->quantize_block(src, block, q1.data(), &d1, s1.data());
      EXPECT_EQ(q0, q1) << isa << " block " << b;
      EXPECT_EQ(s0, s1) << isa << " block " << b;
      EXPECT_EQ(std::memcmp(&d0, &d1, sizeof(float)), 0) << isa << " block " << b << ": " << d0 << " vs " << d1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, QuantizedActivationsTest, ::testing::Values(32, 256));

TEST_P(Int8KernelsTest, MatMulMatchesTheDecodedWeightsTimesQuantizedActivations) {
  const KernelTable* table = KernelsFor(GetParam());
  ASSERT_NE(table, nullptr);
  for (int64_t cols : {32, 64, 96, 256, 512}) {
    for (GgmlType type : QuantizedTypes()) {
      if (cols % GetGgmlTypeInfo(static_cast<uint32_t>(type))->block_values != 0) continue;
      const int64_t rows = cols == 512 ? 77 : 13;
      EncodedMatrix m = Encode(type, Random(rows * cols, 1), rows, cols);
      const PackedMatrix packed(m.w, ComputeDtype::kInt8);
      ASSERT_TRUE(packed.takes_int8());
      for (int tokens : {1, 2, 3, 4, 5, 9}) {
        const std::vector<float> x = Random(static_cast<size_t>(tokens) * cols, 2);
        QuantizedActivations xq;
        xq.Quantize(x.data(), cols, tokens, cols, packed.activation_block());
        std::vector<float> xd(x.size());  // the activations as the kernels see them
        for (int t = 0; t < tokens; ++t) {
          for (int64_t k = 0; k < cols; ++k) xd[t * cols + k] = xq.q(t)[k] * xq.d(t)[k / xq.block()];
        }
        std::vector<float> y(static_cast<size_t>(tokens) * rows, -1.0f);
        MatMulArgs a{&packed, x.data(), cols, tokens, y.data(), rows};
        a.xq = &xq;
        table->matmul[packed.kind()](a, 0, packed.num_panels());
        const std::vector<double> exact = ReferenceMatMul(m.w, xd, tokens);
        const std::vector<double> f32 = ReferenceMatMul(m.w, x, tokens);
        std::vector<float> row(cols);
        for (int t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            DequantizeRow(type, m.w.row(r), row.data(), cols);
            double abs_terms = 0, rounding = 0;
            for (int64_t k = 0; k < cols; ++k) {
              abs_terms += std::fabs(row[k] * xd[t * cols + k]);
              rounding += std::fabs(row[k]) * 0.5 * std::fabs(xq.d(t)[k / xq.block()]);
            }
            const size_t i = t * rows + r;
            // F32 scaling per group: a few roundings of terms up to sum |w x| (the offsets fold
            // a zero point in with one more rounding of each value).
            ASSERT_NEAR(y[i], exact[i], 1e-5 * abs_terms + 1e-6)
                << GetParam() << " " << GgmlTypeName(type) << " cols " << cols << " tokens " << tokens;
            // The activations' rounding moves each term by at most |w| d / 2.
            ASSERT_LE(std::fabs(y[i] - f32[i]), rounding * 1.0001 + 1e-5 * abs_terms + 1e-6)
                << GetParam() << " " << GgmlTypeName(type);
          }
        }
      }
    }
  }
}

TEST_P(Int8KernelsTest, ATokensResultDoesNotDependOnItsBatch) {
  const KernelTable* table = KernelsFor(GetParam());
  const int64_t rows = 40, cols = 256;
  for (GgmlType type : QuantizedTypes()) {
    EncodedMatrix m = Encode(type, Random(rows * cols, 5), rows, cols);
    const PackedMatrix packed(m.w, ComputeDtype::kInt8);
    const int tokens = 7;
    const std::vector<float> x = Random(tokens * cols, 6);
    auto run = [&](int t0, int n) {
      QuantizedActivations xq;
      xq.Quantize(x.data() + t0 * cols, cols, n, cols, packed.activation_block());
      std::vector<float> y(static_cast<size_t>(n) * rows);
      MatMulArgs a{&packed, x.data() + t0 * cols, cols, n, y.data(), rows};
      a.xq = &xq;
      table->matmul[packed.kind()](a, 0, packed.num_panels());
      return y;
    };
    const std::vector<float> all = run(0, tokens);
    for (int t = 0; t < tokens; ++t) {
      const std::vector<float> one = run(t, 1);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(BitsFromF32(one[r]), BitsFromF32(all[t * rows + r])) << GgmlTypeName(type) << " token " << t;
      }
    }
  }
}

TEST(Int8KernelsTest, EveryVectorTableGivesTheSameBits) {
  // The integer sums are exact however an ISA forms them (vpdpbusd, vpmaddubsw on codes below
  // 128, the sign trick on byte codes with the zero point folded in), and the float steps are
  // the same fused multiply-adds: every vector table gives the AVX2 table's bits, in every
  // token tile and its tails. (The generic table rounds a * b + c twice; it is held to the
  // decoded product's bound above.)
  const KernelTable* avx2 = KernelsFor("avx2");
  std::vector<std::string> others;
  for (const std::string& isa : AvailableIsas()) {
    if (isa != "generic" && isa != "avx2") others.push_back(isa);
  }
  if (avx2 == nullptr || others.empty()) GTEST_SKIP() << "needs AVX2 and AVX-512";
  const int64_t rows = 33, cols = 512;
  for (GgmlType type : QuantizedTypes()) {
    EncodedMatrix m = Encode(type, Random(rows * cols, 8), rows, cols);
    const PackedMatrix packed(m.w, ComputeDtype::kInt8);
    for (int tokens : {1, 2, 3, 5, 9}) {
      const std::vector<float> x = Random(tokens * cols, 9);
      QuantizedActivations xq;
      xq.Quantize(x.data(), cols, tokens, cols, packed.activation_block());
      std::vector<float> want(tokens * rows);
      MatMulArgs a{&packed, x.data(), cols, tokens, want.data(), rows};
      a.xq = &xq;
      avx2->matmul[packed.kind()](a, 0, packed.num_panels());
      for (const std::string& isa : others) {
        std::vector<float> got(tokens * rows);
        a.y = got.data();
        KernelsFor(isa)->matmul[packed.kind()](a, 0, packed.num_panels());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(BitsFromF32(got[i]), BitsFromF32(want[i]))
              << isa << " " << GgmlTypeName(type) << " tokens " << tokens;
        }
      }
    }
  }
}

TEST_P(Int8KernelsTest, Q8CodesOfMinus128KeepOneTokensBits) {
  // One token may take the signs from the activations (AVX2), exact only without the code
  // -128, which llama.cpp never writes but a file may hold: such a matrix is flagged at
  // packing and its token gets the bits it gets in a batch either way.
  const KernelTable* table = KernelsFor(GetParam());
  const int64_t rows = 21, cols = 256;
  for (bool minus128 : {false, true}) {
    EncodedMatrix m = Encode(GgmlType::kQ8_0, Random(rows * cols, 12), rows, cols);
    if (minus128) {
      for (int64_t r = 0; r < rows; r += 4) reinterpret_cast<BlockQ8_0*>(m.bytes.data() + r * m.w.row_bytes)[1].qs[r % 32] = -128;
    }
    const PackedMatrix packed(m.w, ComputeDtype::kInt8);
    EXPECT_EQ(packed.codes_symmetric(), !minus128);
    const std::vector<float> x = Random(2 * cols, 13);
    QuantizedActivations xq;
    xq.Quantize(x.data(), cols, 2, cols, packed.activation_block());
    std::vector<float> one(rows), two(2 * rows);
    MatMulArgs a{&packed, x.data(), cols, 1, one.data(), rows};
    a.xq = &xq;
    table->matmul[packed.kind()](a, 0, packed.num_panels());
    a.num_tokens = 2;
    a.y = two.data();
    table->matmul[packed.kind()](a, 0, packed.num_panels());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(BitsFromF32(one[r]), BitsFromF32(two[r])) << GetParam() << " -128: " << minus128 << " row " << r;
    }
  }
}

TEST(Int8KernelsTest, PanelsTakeTheStatedBytesPerWeight) {
  const int64_t rows = 64, cols = 1024;
  const struct {
    GgmlType type;
    double bytes_per_weight;
  } kCases[] = {{GgmlType::kQ4_0, 0.625},  {GgmlType::kQ4_1, 0.75},    {GgmlType::kQ4_K, 0.59375},
                {GgmlType::kQ5_0, 0.75},   {GgmlType::kQ5_1, 0.875},   {GgmlType::kQ5_K, 0.71875},
                {GgmlType::kQ8_0, 1.125},  {GgmlType::kIQ4_NL, 0.625}, {GgmlType::kIQ4_XS, 0.625},
                {GgmlType::kQ6_K, 0.828125}, {GgmlType::kQ2_K, 0.40625}, {GgmlType::kQ3_K, 0.453125}};
  EXPECT_EQ(CpuWeightBytes(GgmlType::kF16, rows * cols, 123), 123);  // float tensors as stored
  for (const auto& c : kCases) {
    EncodedMatrix m = Encode(c.type, Random(rows * cols, 4), rows, cols);
    const size_t nbytes = PackedMatrix(m.w, ComputeDtype::kInt8).nbytes();
    EXPECT_DOUBLE_EQ(static_cast<double>(nbytes) / (rows * cols), c.bytes_per_weight) << GgmlTypeName(c.type);
    // What `kvserve plan` counts.
    EXPECT_EQ(CpuWeightBytes(c.type, rows * cols, 0), static_cast<int64_t>(nbytes)) << GgmlTypeName(c.type);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Int8KernelsTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace kernels_int8_test
}  // namespace kvserve::cpu
