#include "cache/kv_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/fp16.h"

namespace kvserve {
namespace {

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

}  // namespace
}  // namespace kvserve
