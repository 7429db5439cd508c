#include "cache/kv_codec.h"

#include <gtest/gtest.h>

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
  Encoded e{std::vector<uint8_t>(KvRowDataBytes(d, hd)), std::vector<uint16_t>(hd / group)};
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
  // max |x| = 127 -> scale 1.0 exactly; values quantize to themselves.
  std::vector<float> x = {127, -127, 0, 1, -1, 2.4f, -2.6f, 63.5f};
  Encoded e = Encode(KvDtype::kInt8, x, 8);
  EXPECT_EQ(F16ToF32(e.scales[0]), 1.0f);
  const int8_t* q = reinterpret_cast<const int8_t*>(e.data.data());
  EXPECT_EQ(std::vector<int>(q, q + 8), (std::vector<int>{127, -127, 0, 1, -1, 2, -3, 64}));
}

TEST(KvCodec, Int4PacksLowAndHighHalvesOfEachGroup) {
  // Group of 4: scale = 7/7 = 1; q = x; byte i = (x[i]+8) | (x[i+2]+8) << 4.
  std::vector<float> x = {7, -7, 1, -2};
  Encoded e = Encode(KvDtype::kInt4, x, 4);
  EXPECT_EQ(F16ToF32(e.scales[0]), 1.0f);
  EXPECT_EQ(e.data[0], (7 + 8) | ((1 + 8) << 4));
  EXPECT_EQ(e.data[1], (-7 + 8) | ((-2 + 8) << 4));
  EXPECT_EQ(Decode(KvDtype::kInt4, e, 4, 4), x);
}

TEST(KvCodec, QuantizedErrorWithinHalfAStep) {
  for (int group : {8, 32, 64, 128}) {
    const int hd = 128;
    const std::vector<float> x = RandomRow(hd, 7 + group, 3.0f);
    for (KvDtype d : {KvDtype::kInt8, KvDtype::kInt4}) {
      const int max_q = d == KvDtype::kInt8 ? 127 : 7;
      Encoded e = Encode(d, x, group);
      const auto y = Decode(d, e, hd, group);
      for (int g = 0; g < hd / group; ++g) {
        float amax = 0;
        for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[g * group + i]));
        const float step = F16ToF32(e.scales[g]);
        EXPECT_NEAR(step, amax / max_q, amax / max_q * 1e-3f);  // f16 rounding of the scale
        for (int i = 0; i < group; ++i) {
          // Half a quantization step, plus the scale's f16 rounding times the code.
          EXPECT_NEAR(y[g * group + i], x[g * group + i], 0.5f * step + max_q * step * 1e-3f)
              << KvDtypeName(d) << " group " << group << " index " << g * group + i;
        }
      }
    }
  }
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
