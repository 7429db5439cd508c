// Scalar conversions between float and the 16-bit formats IEEE half (F16) and bfloat16.
//
// These are the reference conversions; SIMD kernels convert in bulk with F16C / AVX-512 and
// must agree bit for bit (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

namespace kvserve {

inline float F32FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t BitsFromF32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    if (mantissa == 0) return F32FromBits(sign);
    // Subnormal: normalise.
    exponent = 1;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3FF;
    return F32FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (exponent == 31) return F32FromBits(sign | 0x7F800000 | (mantissa << 13));
  return F32FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t F32ToF16(float f) {
  const uint32_t x = BitsFromF32(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 : 0));
  }
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // overflow -> Inf
  if (abs < 0x38800000) {  // result is subnormal or zero
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

inline float Bf16ToF32(uint16_t b) { return F32FromBits(static_cast<uint32_t>(b) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t x = BitsFromF32(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7FFF + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace kvserve
