#include "cache/kv_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/fp16.h"

namespace kvserve {
namespace kv_codec_test {

std::vector<float> RandomRow(int n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> row(n);
  for (float& v : row) v = dist(rng);
  return row;
}

struct Encoded {
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales;
};

Encoded Encode(KvDtype d, const std::vector<float>& x, int group) {
  const int hd = static_cast<int>(x.size());
  Encoded e{std::vector<uint8_t>(KvRowDataBytes(d, hd)), std::vector<uint16_t>(kKvParamsPerGroup * hd / group)};
  EncodeKvRow(d, x.data(), hd, group, e.data.data(), e.scales.data());
  return e;
}

std::vector<float> Decode(KvDtype d, const Encoded& e, int hd, int group) {
  std::vector<float> out(hd);
  DecodeKvRow(d, e.data.data(), e.scales.data(), hd, group, out.data());
  return out;
}

TEST(KvCodec, FloatFormatsRoundTrip) {
  const std::vector<float> x = RandomRow(64, 1);
  EXPECT_EQ(Decode(KvDtype::kF32, Encode(KvDtype::kF32, x, 64), 64, 64), x);
  const auto f16 = Decode(KvDtype::kF16, Encode(KvDtype::kF16, x, 64), 64, 64);
  const auto bf16 = Decode(KvDtype::kBF16, Encode(KvDtype::kBF16, x, 64), 64, 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(f16[i], F16ToF32(F32ToF16(x[i])));
    EXPECT_NEAR(bf16[i], x[i], std::fabs(x[i]) / 128.0f);  // 8 bits of mantissa
  }
}

TEST(KvCodec, Int8ExactBytesForAHandMadeRow) {
  // [min, max] = [-100, 155]: scale = 255 / 255 = 1, bias = -100 + 128 = 28; q = x - 28.
  std::vector<float> x = {-100, 155, 28, 29, 27, 30.4f, 25.6f, 91.5f};
  Encoded e = Encode(KvDtype::kInt8, x, 8);
  EXPECT_EQ(F16ToF32(e.scales[0]), 1.0f);
  EXPECT_EQ(F16ToF32(e.scales[1]), 28.0f);
  const int8_t* q = reinterpret_cast<const int8_t*>(e.data.data());
  EXPECT_EQ(std::vector<int>(q, q + 8), (std::vector<int>{-128, 127, 0, 1, -1, 2, -2, 64}));  // 63.5: to even
}

TEST(KvCodec, Int4PacksLowAndHighHalvesOfEachGroup) {
  // Group of 4 in [1, 16]: scale = 15 / 15 = 1, bias = 1 + 8 = 9; q = x - 9 stored as q + 8,
  // byte i = (q[i]+8) | (q[i+2]+8) << 4.
  std::vector<float> x = {16, 1, 10, 7};
  Encoded e = Encode(KvDtype::kInt4, x, 4);
  EXPECT_EQ(F16ToF32(e.scales[0]), 1.0f);
  EXPECT_EQ(F16ToF32(e.scales[1]), 9.0f);
  EXPECT_EQ(e.data[0], (7 + 8) | ((1 + 8) << 4));
  EXPECT_EQ(e.data[1], (-8 + 8) | ((-2 + 8) << 4));
  EXPECT_EQ(Decode(KvDtype::kInt4, e, 4, 4), x);
}

TEST(KvCodec, QuantizedErrorWithinHalfAStep) {
  for (int group : {8, 32, 64, 128}) {
    const int hd = 128;
    std::vector<float> x = RandomRow(hd, 7 + group, 3.0f);
    for (int i = 0; i < hd; i += 3) x[i] += 20.0f;  // skewed groups use the zero point
    for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) {
      const int levels = d == KvDtype::kInt8 ? 255 : 15;
      Encoded e = Encode(d, x, group);
      const auto y = Decode(d, e, hd, group);
      for (int g = 0; g < hd / group; ++g) {
        const auto [lo, hi] = std::minmax_element(x.begin() + g * group, x.begin() + (g + 1) * group);
        const float step = F16ToF32(e.scales[2 * g]);
        EXPECT_NEAR(step, (*hi - *lo) / levels, (*hi - *lo) / levels * 1e-3f);  // f16 rounding of the scale
        // The bias's f16 rounding shifts the codes; the range still fits within one step.
        const float bias_err = std::fabs(F16ToF32(e.scales[2 * g + 1]) - (*lo + (levels + 1) / 2 * step));
        for (int i = 0; i < group; ++i) {
          // Half a step, the bias's rounding, and the scale's rounding times the largest code.
          EXPECT_NEAR(y[g * group + i], x[g * group + i], 0.5f * step + bias_err + levels * step * 1e-3f)
              << KvDtypeName(d) << " group " << group << " index " << g * group + i;
        }
      }
    }
  }
}

TEST(KvCodec, ConstantGroupsDecodeToTheirF16Value) {
  std::vector<float> x(16, 0.0f);
  std::fill(x.begin() + 8, x.end(), -2.5f);
  for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) EXPECT_EQ(Decode(d, Encode(d, x, 8), 16, 8), x);
}

TEST(KvCodec, AllZeroRowEncodesToZero) {
  std::vector<float> x(32, 0.0f);
  for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) {
    Encoded e = Encode(d, x, 32);
    EXPECT_EQ(Decode(d, e, 32, 32), x);
  }
}

// INT4C keys: each channel is a group running down the block's rows.
TEST(KvCodec, PerChannelKeysErrorWithinHalfAStepOfTheirChannel) {
  for (int group : {8, 64, 128}) {
    constexpr int kHd = 128, kRows = 16;
    std::vector<float> x = RandomRow(kHd * kRows, 11 + group);
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kHd; c += 5) x[r * kHd + c] += 10.0f + c;  // per-channel offsets, as RoPE'd keys
    }
    const size_t row_bytes = KvRowDataBytes(KvDtype::kInt4C, kHd);
    for (int n : {1, 7, kRows}) {  // a full block, and the rows a partial one has
      std::vector<uint8_t> data(kRows * row_bytes, 0xAB);
      std::vector<uint16_t> params(kKvParamsPerGroup * kHd);
      EncodeKvKeysPerChannel(x.data(), n, kHd, group, data.data(), params.data());
      for (size_t i = n * row_bytes; i < data.size(); ++i) ASSERT_EQ(data[i], 0xAB) << "rows >= n are not touched";
      std::vector<float> y(kHd);
      for (int r = 0; r < n; ++r) {
        DecodeKvKeyRowPerChannel(&data[r * row_bytes], params.data(), kHd, group, y.data());
        for (int c = 0; c < kHd; ++c) {
          float lo = x[c], hi = x[c];
          for (int k = 0; k < n; ++k) {
            lo = std::min(lo, x[k * kHd + c]);
            hi = std::max(hi, x[k * kHd + c]);
          }
          const float step = F16ToF32(params[2 * c]);
          const float bias_err = std::fabs(F16ToF32(params[2 * c + 1]) - (lo + 8 * step));
          EXPECT_NEAR(y[c], x[r * kHd + c], 0.5f * step + bias_err + 15 * step * 1e-3f + 1e-6f)
              << "group " << group << " rows " << n << " row " << r << " channel " << c;
        }
      }
    }
  }
}

// The codes sit where an INT4 row puts them (the CPU attention reads them with the INT4 key
// kernel and unit scales): an INT4 decode with scale 1 and bias 0 gives the bare codes.
TEST(KvCodec, PerChannelKeysPackNibblesLikeInt4Rows) {
  constexpr int kHd = 16, kGroup = 8;
  std::vector<float> two(2 * kHd);  // two rows: each channel spans [0, 15], codes -8 and 7
  for (int c = 0; c < kHd; ++c) {
    two[c] = 0.0f;
    two[kHd + c] = 15.0f;
  }
  const size_t row_bytes = KvRowDataBytes(KvDtype::kInt4C, kHd);
  std::vector<uint8_t> data(2 * row_bytes);
  std::vector<uint16_t> params(2 * kHd);
  EncodeKvKeysPerChannel(two.data(), 2, kHd, kGroup, data.data(), params.data());
  for (size_t i = 0; i < row_bytes; ++i) {
    EXPECT_EQ(data[i], 0x00) << i;              // row 0: every channel at code -8
    EXPECT_EQ(data[row_bytes + i], 0xFF) << i;  // row 1: every channel at code 7
  }
  // Per-row INT4 with unit scales decodes the same codes (low nibble = channel i, high = i + G/2).
  std::vector<uint16_t> unit(2 * kHd / kGroup);
  for (size_t g = 0; g < unit.size(); g += 2) unit[g] = F32ToF16(1.0f);
  std::vector<float> as_int4(kHd);
  DecodeKvRow(KvDtype::kInt4, &data[row_bytes], unit.data(), kHd, kGroup, as_int4.data());
  for (int c = 0; c < kHd; ++c) EXPECT_EQ(as_int4[c], 7.0f) << c;
}

}  // namespace kv_codec_test
}  // namespace kvserve
