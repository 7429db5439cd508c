// BF16 compute (compute_dtype.h): the rounding of activations, the pair panels' products on
// every kernel table (bit-identical, native vdpbf16ps or emulated), their accuracy and their
// independence of the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "tests/unit/backend/kernels_test_util.h"

namespace kvserve::cpu {
namespace kernels_bf16_test {

uint16_t Round1(float f) {
  uint16_t out[2];
  RoundToBf16(&f, 1, 1, 1, out, 2);
  return out[0];
}

TEST(RoundToBf16Test, RoundsToNearestEvenKeepsNanQuietAndFlushesSubnormals) {
  EXPECT_EQ(Round1(1.0f), 0x3F80);
  EXPECT_EQ(Round1(F32FromBits(0x3F808000)), 0x3F80);  // tie, even below
  EXPECT_EQ(Round1(F32FromBits(0x3F818000)), 0x3F82);  // tie, even above
  EXPECT_EQ(Round1(F32FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(Round1(-2.5f), 0xC020);
  EXPECT_EQ(Round1(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Round1(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Round1(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to infinity
  EXPECT_EQ(Round1(F32FromBits(0x7F800001)), 0x7FC0);            // signalling NaN: quiet
  EXPECT_EQ(Round1(F32FromBits(0xFFC12345)), 0xFFC1);
  EXPECT_EQ(Round1(F32FromBits(0x00000001)), 0x0000);  // subnormals: signed zero
  EXPECT_EQ(Round1(F32FromBits(0x807FFFFF)), 0x8000);
  EXPECT_EQ(Round1(std::numeric_limits<float>::min()), 0x0080);
  // Rows: an odd column count gets a zero column; ldx and ldxb are honoured.
  const float x[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  std::vector<uint16_t> xb(8, 0xFFFF);
  RoundToBf16(x, 3, 2, 3, xb.data(), 4);
  EXPECT_EQ(xb, (std::vector<uint16_t>{0x3F80, 0x4000, 0x4040, 0, 0x4080, 0x40A0, 0x40C0, 0}));
}

// Operands as the BF16 products see them.
std::vector<float> Bf16Rounded(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size() + 1);
  RoundToBf16(v.data(), 0, 1, static_cast<int64_t>(v.size()), b.data(), 0);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(b[i]);
  return out;
}

struct Product {
  std::vector<float> y;
  int kind = -1;
};
Product RunBf16(const KernelTable& table, const WeightMatrix& w, const std::vector<float>& x, int tokens) {
  const PackedMatrix packed(w, ComputeDtype::kBF16);
  const int64_t ldxb = w.cols + w.cols % 2;
  std::vector<uint16_t> xb(static_cast<size_t>(tokens) * ldxb);
  RoundToBf16(x.data(), w.cols, tokens, w.cols, xb.data(), ldxb);
  Product p{std::vector<float>(static_cast<size_t>(tokens) * w.rows, -1.0f), packed.kind()};
  MatMulArgs a{&packed, x.data(), w.cols, tokens, p.y.data(), w.rows, xb.data(), ldxb};
  table.matmul[packed.kind()](a, 0, packed.num_panels());
  return p;
}

class Bf16KernelsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16KernelsTest, EveryTableComputesTheSameBitsAsTheRoundedOperandsInDouble) {
  const KernelTable* table = KernelsFor(GetParam());
  ASSERT_NE(table, nullptr);
  for (int64_t cols : {2, 31, 64, 172, 1023, 1024}) {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      const int64_t rows = cols >= 1023 ? 77 : 13;
      std::vector<float> values = Random(rows * cols, 1);
      if (type == GgmlType::kF32) values[3] = 1e-39f;  // a subnormal weight: flushed
      EncodedMatrix m = Encode(type, values, rows, cols);
      std::vector<float> dequantized(values.size());
      for (int64_t r = 0; r < rows; ++r) DequantizeRow(type, m.w.row(r), &dequantized[r * cols], cols);
      const std::vector<float> wr = Bf16Rounded(dequantized);
      for (int tokens : {1, 2, 5, 8, 9, 17}) {
        std::vector<float> x = Random(static_cast<size_t>(tokens) * cols, 2);
        x[0] = -1e-40f;  // a subnormal activation: flushed
        const Product got = RunBf16(*table, m.w, x, tokens);
        ASSERT_EQ(got.kind, kBf16PairKind);
        const Product generic = RunBf16(GenericKernels(), m.w, x, tokens);
        const std::vector<float> xr = Bf16Rounded(x);
        for (int t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const size_t i = t * rows + r;
            ASSERT_EQ(BitsFromF32(got.y[i]), BitsFromF32(generic.y[i]))
                << GetParam() << " " << GgmlTypeName(type) << " cols " << cols << " tokens " << tokens;
            double ref = 0;
            for (int64_t k = 0; k < cols; ++k) ref += static_cast<double>(wr[r * cols + k]) * xr[t * cols + k];
            // F32 accumulation over `cols` exact products of magnitude ~1.
            ASSERT_NEAR(got.y[i], ref, 1e-5 * cols) << GetParam() << " " << GgmlTypeName(type);
          }
        }
      }
    }
  }
}

TEST_P(Bf16KernelsTest, StaysWithinBf16RoundingOfTheF32Product) {
  // Each operand is rounded to 8 significant bits (relative error <= 2^-9), so each product
  // is off by at most ~2^-8 of its magnitude: |y - exact| <= 2^-8 * sum |w x| (+ F32 sums).
  const KernelTable* table = KernelsFor(GetParam());
  const int64_t rows = 40, cols = 768;
  EncodedMatrix m = Encode(GgmlType::kF16, Random(rows * cols, 3), rows, cols);
  const std::vector<float> x = Random(4 * cols, 4);
  const Product got = RunBf16(*table, m.w, x, 4);
  const std::vector<double> exact = ReferenceMatMul(m.w, x, 4);
  std::vector<float> row(cols);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(GgmlType::kF16, m.w.row(r), row.data(), cols);
    for (int t = 0; t < 4; ++t) {
      double magnitude = 0;
      for (int64_t k = 0; k < cols; ++k) magnitude += std::fabs(static_cast<double>(row[k]) * x[t * cols + k]);
      const double err = std::fabs(got.y[t * rows + r] - exact[t * rows + r]);
      ASSERT_LE(err, std::ldexp(magnitude, -8) + 1e-5 * cols) << "row " << r << " token " << t;
      worst = std::max(worst, err / magnitude);
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

TEST_P(Bf16KernelsTest, IsIndependentOfBatchComposition) {
  const KernelTable* table = KernelsFor(GetParam());
  const int64_t rows = 70, cols = 255;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    EncodedMatrix m = Encode(type, Random(rows * cols, 5), rows, cols);
    const std::vector<float> x = Random(16 * cols, 6);
    const std::vector<float> all = RunBf16(*table, m.w, x, 16).y;
    for (int batch : {1, 2, 7}) {
      for (int t0 = 0; t0 + batch <= 16; t0 += batch) {
        const std::vector<float> part(x.begin() + t0 * cols, x.begin() + (t0 + batch) * cols);
        const std::vector<float> y = RunBf16(*table, m.w, part, batch).y;
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(BitsFromF32(y[i]), BitsFromF32(all[t0 * rows + i])) << GgmlTypeName(type) << " batch " << batch;
        }
      }
    }
  }
}

TEST(Bf16KernelsTest, QuantizedMatricesTakeInt8Activations) {
  EncodedMatrix m = Encode(GgmlType::kQ8_0, Random(16 * 64, 7), 16, 64);
  EXPECT_EQ(PackedMatrix(m.w, ComputeDtype::kBF16).kind(), DotKind(GgmlType::kQ8_0));
  EXPECT_TRUE(PackedMatrix(m.w, ComputeDtype::kBF16).takes_int8());
  EXPECT_FALSE(PackedMatrix(m.w, ComputeDtype::kBF16).takes_bf16());
  EXPECT_EQ(PackedMatrix(m.w, ComputeDtype::kF32).kind(), WeightKind(GgmlType::kQ8_0));
}

INSTANTIATE_TEST_SUITE_P(Isas, Bf16KernelsTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace kernels_bf16_test
}  // namespace kvserve::cpu
