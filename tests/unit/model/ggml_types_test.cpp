// Tests of the ggml type table and the reference codecs: exact decodes of hand-made blocks
// (bytes laid out by hand from the ggml spec), encode->decode error bounds for every
// quantized type, and round-to-nearest-even of the F16/BF16 scalar conversions (exhaustive
// over all half values and their rounding midpoints).
#include "engine/model/ggml_types.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"

namespace kvserve {
namespace ggml_types_test {

std::vector<float> Decode(GgmlType type, const void* bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  DequantizeRow(type, bytes, out.data(), n);
  return out;
}

std::string Encode(GgmlType type, const std::vector<float>& values) {
  const uint64_t bytes = GgmlRowBytes(type, values.size()).value();
  std::string out(bytes, '\0');
  QuantizeRow(type, values.data(), out.data(), static_cast<int64_t>(values.size()));
  return out;
}

// ---- Type table ----------------------------------------------------------------------------

TEST(GgmlTypesTest, TableHasTheGgufLayouts) {
  struct Row {
    GgmlType type;
    const char* name;
    int block_values, block_bytes;
  };
  for (const Row& row : {Row{GgmlType::kF32, "f32", 1, 4}, Row{GgmlType::kF16, "f16", 1, 2},
                         Row{GgmlType::kBF16, "bf16", 1, 2}, Row{GgmlType::kQ8_0, "q8_0", 32, 34},
                         Row{GgmlType::kQ4_0, "q4_0", 32, 18}, Row{GgmlType::kQ4_K, "q4_k", 256, 144},
                         Row{GgmlType::kQ6_K, "q6_k", 256, 210}}) {
    auto info = GetGgmlTypeInfo(static_cast<uint32_t>(row.type));
    ASSERT_TRUE(info.has_value()) << row.name;
    EXPECT_EQ(info->name, row.name);
    EXPECT_EQ(info->block_values, row.block_values) << row.name;
    EXPECT_EQ(info->block_bytes, row.block_bytes) << row.name;
    EXPECT_TRUE(info->can_dequantize) << row.name;
    EXPECT_EQ(ParseGgmlType(row.name), row.type);
  }
  EXPECT_EQ(ParseGgmlType("Q4_K"), GgmlType::kQ4_K);
  EXPECT_FALSE(ParseGgmlType("q5_k").has_value());
  EXPECT_FALSE(GetGgmlTypeInfo(5).has_value());  // removed Q4_2
  EXPECT_FALSE(GetGgmlTypeInfo(99).has_value());
  EXPECT_FALSE(GetGgmlTypeInfo(13 + 256).has_value());
  EXPECT_TRUE(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ5_K))->can_dequantize);  // decode only
  EXPECT_EQ(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ5_K))->block_bytes, 176);
  EXPECT_TRUE(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ5_0))->can_dequantize);  // decode only
  EXPECT_FALSE(GetGgmlTypeInfo(static_cast<uint32_t>(GgmlType::kQ8_1))->can_dequantize);
}

TEST(GgmlTypesTest, RowBytes) {
  EXPECT_EQ(GgmlRowBytes(GgmlType::kF32, 7).value(), 28u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kBF16, 3).value(), 6u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ8_0, 64).value(), 68u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ4_K, 512).value(), 288u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ6_K, 256).value(), 210u);
  StatusOr<uint64_t> bad = GgmlRowBytes(GgmlType::kQ4_K, 128);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q4_k"), std::string::npos);
  EXPECT_EQ(GgmlRowBytes(static_cast<GgmlType>(77), 32).status().code(),
            StatusCode::kInvalidArgument);
}

// ---- F16 / BF16 scalar conversions ----------------------------------------------------------

TEST(GgmlTypesTest, F16ExactCases) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);                         // largest finite
  EXPECT_EQ(F32ToF16(65519.99f), 0x7BFF);                        // below the midpoint
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);                         // midpoint: to even = inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = F32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x3FF, 0);
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3C00);                  // tie -> even (down)
  EXPECT_EQ(F32ToF16(1.0f + 3 * 0x1p-11f), 0x3C02);              // tie -> even (up)
  EXPECT_EQ(F32ToF16(0x1p-14f), 0x0400);                         // smallest normal
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);                         // smallest subnormal
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);                         // tie -> even (zero)
  EXPECT_EQ(F32ToF16(0x1.000002p-25f), 0x0001);                  // just above the tie
  EXPECT_EQ(F32ToF16(3 * 0x1p-25f), 0x0002);                     // tie 1.5 ulp -> 2
  EXPECT_EQ(F32ToF16(0x1p-14f - 0x1p-25f), 0x0400);              // tie below min normal
  EXPECT_EQ(F32ToF16(-0x1p-30f), 0x8000);                        // underflow keeps sign

  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToF32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F16ToF32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_EQ(F16ToF32(0x8001), -0x1p-24f);
}

// Every finite half survives F16 -> F32 -> F16, and every midpoint between neighbours rounds
// to the even one, with one float ulp either side rounding to the nearer one.
TEST(GgmlTypesTest, F16RoundsToNearestEvenExhaustively) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf, NaN
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7BFF; ++h) {
      const uint16_t lo = static_cast<uint16_t>(sign | h), hi = static_cast<uint16_t>(sign | (h + 1));
      const float a = F16ToF32(lo), b = F16ToF32(hi);
      const float mid = (a + b) / 2;  // exact: halves have 11 significant bits
      const uint16_t even = (h & 1) == 0 ? lo : hi;
      ASSERT_EQ(F32ToF16(mid), even) << std::hex << h;
      ASSERT_EQ(F32ToF16(std::nextafter(mid, a)), lo) << std::hex << h;
      ASSERT_EQ(F32ToF16(std::nextafter(mid, b)), hi) << std::hex << h;
    }
  }
}

TEST(GgmlTypesTest, Bf16ExactCases) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even (down)
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie -> 0
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie -> 2
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00010000u)), 0x0001);  // exact subnormal
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // A NaN whose payload lives only in the low 16 bits must stay a NaN (not become inf).
  const uint16_t nan = F32ToBf16(std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x7F, 0);
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0x0001), std::bit_cast<float>(0x00010000u));
  EXPECT_TRUE(std::isnan(Bf16ToF32(0x7FC0)));
}

TEST(GgmlTypesTest, Bf16RoundsToNearestEvenExhaustively) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7F7F; ++h) {
      const uint16_t lo = static_cast<uint16_t>(sign | h), hi = static_cast<uint16_t>(sign | (h + 1));
      ASSERT_EQ(F32ToBf16(Bf16ToF32(lo)), lo);
      const uint32_t mid_bits = (static_cast<uint32_t>(lo) << 16) | 0x8000;
      const uint16_t even = (h & 1) == 0 ? lo : hi;
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>(mid_bits)), even) << std::hex << h;
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>(mid_bits - 1)), lo) << std::hex << h;
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>(mid_bits + 1)), hi) << std::hex << h;
    }
  }
}

TEST(GgmlTypesTest, F16AndBf16RowsRoundTrip) {
  const std::vector<float> values = {1.0f, -0.5f, 0.1f, 65504.0f, 0x1p-24f, 3.140625f};
  const std::vector<float> f16 = Decode(GgmlType::kF16, Encode(GgmlType::kF16, values).data(), 6);
  const std::vector<float> bf16 = Decode(GgmlType::kBF16, Encode(GgmlType::kBF16, values).data(), 6);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f16[i], F16ToF32(F32ToF16(values[i])));
    EXPECT_EQ(bf16[i], Bf16ToF32(F32ToBf16(values[i])));
  }
  EXPECT_EQ(f16[2], 0.0999755859375f);  // 0x2E66
  EXPECT_EQ(bf16[2], 0.10009765625f);   // 0x3DCD
  const std::vector<float> f32 = Decode(GgmlType::kF32, Encode(GgmlType::kF32, values).data(), 6);
  EXPECT_EQ(f32, values);
}

// ---- Hand-made blocks -----------------------------------------------------------------------

TEST(GgmlTypesTest, Q8_0HandMadeBlock) {
  BlockQ8_0 block;
  block.d = 0x3800;  // 0.5
  for (int i = 0; i < 32; ++i) block.qs[i] = static_cast<int8_t>(i * 8 - 128);  // -128..120
  const std::vector<float> y = Decode(GgmlType::kQ8_0, &block, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[17], 4.0f);
  EXPECT_EQ(y[31], 60.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], (i * 8 - 128) * 0.5f);
}

TEST(GgmlTypesTest, Q4_0HandMadeBlock) {
  BlockQ4_0 block;
  block.d = 0xC000;  // -2.0
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = Decode(GgmlType::kQ4_0, &block, 32);
  EXPECT_EQ(y[0], 16.0f);    // (0 - 8) * -2
  EXPECT_EQ(y[8], -0.0f);    // (8 - 8) * -2
  EXPECT_EQ(y[15], -14.0f);  // (15 - 8) * -2
  EXPECT_EQ(y[16], -14.0f);  // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], 16.0f);   // high nibble of qs[15] = 0
}

// d = 1, dmin = 0.5; sub-block scales {1, 2, 3, 63, 17, 33, 48, 63} and mins
// {0, 1, 5, 63, 16, 31, 47, 62}: sub-blocks 4..7 need the high bits in bytes 0..7.
TEST(GgmlTypesTest, Q4_KHandMadeBlock) {
  BlockQ4_K block;
  block.d = 0x3C00;
  block.dmin = 0x3800;
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xFF,   // sc[0..3] | sc[4..7] >> 4 << 6
                              0x40, 0x41, 0x85, 0xFF,   // m[0..3]  | m[4..7] >> 4 << 6
                              0x01, 0xF1, 0xF0, 0xEF};  // sc[4..7] & 15 | (m[4..7] & 15) << 4
  std::memcpy(block.scales, scales, 12);
  for (int i = 0; i < 128; ++i) block.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const std::vector<float> y = Decode(GgmlType::kQ4_K, &block, 256);
  EXPECT_EQ(y[0], 0.0f);                     // sub-block 0: 1 * 0 - 0
  EXPECT_EQ(y[1], 1.0f);                     // 1 * 1 - 0
  EXPECT_EQ(y[32], 29.5f);                   // sub-block 1: 2 * 15 - 0.5 * 1
  EXPECT_EQ(y[64 + 3], 6.5f);                // sub-block 2: 3 * 3 - 0.5 * 5
  EXPECT_EQ(y[96 + 0], 945.0f - 31.5f);      // sub-block 3: 63 * 15 - 0.5 * 63
  EXPECT_EQ(y[128 + 2], 34.0f - 8.0f);       // sub-block 4: 17 * 2 - 0.5 * 16
  EXPECT_EQ(y[160 + 2], 413.5f);             // sub-block 5: 33 * 13 - 0.5 * 31
  EXPECT_EQ(y[192 + 5], 216.5f);             // sub-block 6: 48 * 5 - 0.5 * 47
  EXPECT_EQ(y[255], -31.0f);                 // sub-block 7: 63 * 0 - 0.5 * 62
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 63};
  const int m[8] = {0, 1, 5, 63, 16, 31, 47, 62};
  for (int v = 0; v < 256; ++v) {
    const int sub = v / 32, chunk = v / 64, l = v % 32;
    const int byte = block.qs[32 * chunk + l];
    const int q = sub % 2 == 0 ? byte & 0xF : byte >> 4;
    EXPECT_EQ(y[v], 1.0f * sc[sub] * q - 0.5f * m[sub]) << v;
  }
}

// Q5_K: the Q4_K block above plus a fifth bit, qh[l] = l * 37 (every bit pattern of the 8
// sub-blocks occurs); value v of sub-block j = d * sc[j] * (q + 16 * bit j of qh[v % 32]) -
// dmin * m[j].
TEST(GgmlTypesTest, Q5_KHandMadeBlock) {
  BlockQ5_K block;
  block.d = 0x3C00;
  block.dmin = 0x3800;
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xFF, 0x40, 0x41, 0x85, 0xFF, 0x01, 0xF1, 0xF0, 0xEF};
  std::memcpy(block.scales, scales, 12);
  for (int i = 0; i < 128; ++i) block.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  for (int l = 0; l < 32; ++l) block.qh[l] = static_cast<uint8_t>(l * 37);
  const std::vector<float> y = Decode(GgmlType::kQ5_K, &block, 256);
  EXPECT_EQ(y[0], 0.0f);                   // sub-block 0, l = 0: q 0, no fifth bit
  EXPECT_EQ(y[1], 17.0f);                  // l = 1: qh 37 = 0b100101, bit 0 set: 1 * (1 + 16)
  EXPECT_EQ(y[32 + 1], 1.0f * 2 * 14 - 0.5f);  // sub-block 1, bit 1 of 37 clear: 2 * 14 - 0.5
  EXPECT_EQ(y[64 + 1], 3.0f * (1 + 16) - 2.5f);  // sub-block 2, bit 2 of 37 set
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 63};
  const int m[8] = {0, 1, 5, 63, 16, 31, 47, 62};
  for (int v = 0; v < 256; ++v) {
    const int sub = v / 32, chunk = v / 64, l = v % 32;
    const int byte = block.qs[32 * chunk + l];
    const int q = (sub % 2 == 0 ? byte & 0xF : byte >> 4) + 16 * ((block.qh[l] >> sub) & 1);
    EXPECT_EQ(y[v], 1.0f * sc[sub] * q - 0.5f * m[sub]) << v;
  }
}

// d = 0.5; scales {1, -2, 3, -4, ..., -16}; ql[i] = i; qh[i] = 3 * i.
TEST(GgmlTypesTest, Q6_KHandMadeBlock) {
  BlockQ6_K block;
  block.d = 0x3800;
  for (int i = 0; i < 16; ++i) block.scales[i] = static_cast<int8_t>(i % 2 == 0 ? i + 1 : -(i + 1));
  for (int i = 0; i < 128; ++i) block.ql[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64; ++i) block.qh[i] = static_cast<uint8_t>(3 * i);
  const std::vector<float> y = Decode(GgmlType::kQ6_K, &block, 256);
  // v=0: ql[0] low 0, qh[0] bits 0-1 = 0 -> q 0 - 32; scale 1.
  EXPECT_EQ(y[0], -16.0f);
  // v=33: ql[33] low 1, qh[1]=3 bits 2-3 = 0 -> 1 - 32; scale[2] = 3.
  EXPECT_EQ(y[33], -46.5f);
  // v=70: ql[6] high 0, qh[6]=18 bits 4-5 = 1 -> 16 - 32; scale[4] = 5.
  EXPECT_EQ(y[70], -40.0f);
  // v=149: ql[85] low 5, qh[53]=159 bits 0-1 = 3 -> 53 - 32; scale[9] = -10.
  EXPECT_EQ(y[149], -105.0f);
  // v=255: ql[127] high 7, qh[63]=189 bits 6-7 = 2 -> 39 - 32; scale[15] = -16.
  EXPECT_EQ(y[255], -56.0f);
}

// ---- Encode -> decode bounds ---------------------------------------------------------------

// Rows exercising the encoders: random mixed-sign, all-positive, all-negative, a spike,
// constant, zeros, and tiny-magnitude sub-blocks next to large ones.
std::vector<std::vector<float>> TestRows(int n) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  std::vector<float> row(static_cast<size_t>(n));
  for (float& x : row) x = uniform(rng);
  rows.push_back(row);
  for (float& x : row) x = normal(rng) * 3.0f;
  rows.push_back(row);
  for (float& x : row) x = std::fabs(uniform(rng)) + 0.5f;
  rows.push_back(row);
  for (float& x : row) x = -std::fabs(uniform(rng)) * 7.0f - 1.0f;
  rows.push_back(row);
  std::fill(row.begin(), row.end(), 0.01f);
  row[5] = -2.5f;
  rows.push_back(row);
  std::fill(row.begin(), row.end(), 0.75f);
  rows.push_back(row);
  std::fill(row.begin(), row.end(), 0.0f);
  rows.push_back(row);
  for (int i = 0; i < n; ++i) row[i] = (i / 16) % 3 == 0 ? uniform(rng) * 0.05f : uniform(rng) * 4.0f;
  rows.push_back(row);
  return rows;
}

// Max |decoded - x| per block must stay within bound(amax of the block).
void ExpectRoundTripWithin(GgmlType type, int block_values, double relative_bound) {
  const int n = 1024;
  for (const std::vector<float>& row : TestRows(n)) {
    const std::string bytes = Encode(type, row);
    const std::vector<float> y = Decode(type, bytes.data(), n);
    for (int b = 0; b < n / block_values; ++b) {
      float amax = 0;
      for (int i = 0; i < block_values; ++i) amax = std::max(amax, std::fabs(row[b * block_values + i]));
      const double bound = relative_bound * amax * (1 + 1e-6);
      for (int i = 0; i < block_values; ++i) {
        const int v = b * block_values + i;
        ASSERT_LE(std::fabs(static_cast<double>(y[v]) - row[v]), bound)
            << GgmlTypeName(type) << " value " << v << " x=" << row[v] << " amax=" << amax;
      }
    }
  }
}

TEST(GgmlTypesTest, Q8_0RoundTripBound) {
  ExpectRoundTripWithin(GgmlType::kQ8_0, 32, 1.0 / 254 + std::ldexp(1.0, -11));
}

TEST(GgmlTypesTest, Q4_0RoundTripBound) {
  ExpectRoundTripWithin(GgmlType::kQ4_0, 32, 1.0 / 8 * (1 + std::ldexp(1.0, -8)));
}

TEST(GgmlTypesTest, Q4_KRoundTripBound) { ExpectRoundTripWithin(GgmlType::kQ4_K, 256, 0.0683); }

TEST(GgmlTypesTest, Q6_KRoundTripBound) { ExpectRoundTripWithin(GgmlType::kQ6_K, 256, 0.01626); }

// Values the formats represent exactly come back exactly.
TEST(GgmlTypesTest, ExactlyRepresentableValuesRoundTripExactly) {
  std::vector<float> q8(32);
  q8[0] = 127.0f;  // amax 127: d = 1 exactly
  for (int i = 1; i < 32; ++i) q8[i] = static_cast<float>(i * 4 - 64);
  EXPECT_EQ(Decode(GgmlType::kQ8_0, Encode(GgmlType::kQ8_0, q8).data(), 32), q8);

  std::vector<float> q4(32);
  for (int i = 0; i < 32; ++i) q4[i] = static_cast<float>(i % 16 - 8);  // max = -8: d = 1
  EXPECT_EQ(Decode(GgmlType::kQ4_0, Encode(GgmlType::kQ4_0, q4).data(), 32), q4);

  const std::vector<float> zeros(256, 0.0f);
  EXPECT_EQ(Decode(GgmlType::kQ4_K, Encode(GgmlType::kQ4_K, zeros).data(), 256), zeros);
  EXPECT_EQ(Decode(GgmlType::kQ6_K, Encode(GgmlType::kQ6_K, zeros).data(), 256), zeros);
}

// The encoders' blocks are well-formed: 6-bit Q4_K scales/mins, Q6_K quants in [-31, 31] and
// positive scales.
TEST(GgmlTypesTest, KQuantEncodersUseTheirRanges) {
  const std::vector<std::vector<float>> rows = TestRows(256);
  for (const std::vector<float>& row : rows) {
    const std::string q6 = Encode(GgmlType::kQ6_K, row);
    BlockQ6_K b6;
    std::memcpy(&b6, q6.data(), sizeof(b6));
    for (int8_t s : b6.scales) EXPECT_GE(s, 0);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        for (int g = 0; g < 4; ++g) {
          const uint8_t ql = b6.ql[64 * h + l + 32 * (g & 1)];
          const int q = ((g < 2 ? ql & 0xF : ql >> 4) | (((b6.qh[32 * h + l] >> (2 * g)) & 3) << 4));
          EXPECT_GE(q, 1);  // q - 32 >= -31
        }
      }
    }
    const std::string q4 = Encode(GgmlType::kQ4_K, row);
    BlockQ4_K b4;
    std::memcpy(&b4, q4.data(), sizeof(b4));
    EXPECT_FALSE(std::signbit(F16ToF32(b4.d)));
    EXPECT_FALSE(std::signbit(F16ToF32(b4.dmin)));
  }
}

}  // namespace ggml_types_test
}  // namespace kvserve
