// Type table and CPU reference codecs of the ggml tensor types.
//
// Decoders follow ggml's reference dequantize_row_* formulas bit for bit (same bit layout,
// same order of float operations). Q8_0/Q4_0 encoders follow ggml's reference quantizers;
// the Q4_K/Q6_K encoders are simple min/max ones (not ggml's search-based quantizer) whose
// error bounds are stated in ggml_types.h. Pure functions; thread-safe.
#include "engine/model/ggml_types.h"

#include "engine/model/ggml_decoders.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <string>

#include "common/fp16.h"

namespace kvserve {

std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return GgmlTypeInfo{"f32", 1, 4, true};
    case GgmlType::kF16: return GgmlTypeInfo{"f16", 1, 2, true};
    case GgmlType::kBF16: return GgmlTypeInfo{"bf16", 1, 2, true};
    case GgmlType::kQ8_0: return GgmlTypeInfo{"q8_0", 32, 34, true};
    case GgmlType::kQ4_0: return GgmlTypeInfo{"q4_0", 32, 18, true};
    case GgmlType::kQ4_1: return GgmlTypeInfo{"q4_1", 32, 20, true};
    case GgmlType::kQ5_0: return GgmlTypeInfo{"q5_0", 32, 22, true};
    case GgmlType::kQ5_1: return GgmlTypeInfo{"q5_1", 32, 24, true};
    case GgmlType::kQ8_1: return GgmlTypeInfo{"q8_1", 32, 36, false};
    case GgmlType::kQ2_K: return GgmlTypeInfo{"q2_k", 256, 84, true};
    case GgmlType::kQ3_K: return GgmlTypeInfo{"q3_k", 256, 110, true};
    case GgmlType::kQ4_K: return GgmlTypeInfo{"q4_k", 256, 144, true};
    case GgmlType::kQ5_K: return GgmlTypeInfo{"q5_k", 256, 176, true};
    case GgmlType::kQ6_K: return GgmlTypeInfo{"q6_k", 256, 210, true};
    case GgmlType::kQ8_K: return GgmlTypeInfo{"q8_k", 256, 292, false};
    case GgmlType::kIQ4_NL: return GgmlTypeInfo{"iq4_nl", 32, 18, true};
    case GgmlType::kIQ4_XS: return GgmlTypeInfo{"iq4_xs", 256, 136, true};
  }
  return std::nullopt;
}

std::string_view GgmlTypeName(GgmlType type) {
  auto info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  return info ? info->name : std::string_view("unknown");
}

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    if (GgmlTypeName(t) == lower) return t;
  }
  return std::nullopt;
}

StatusOr<uint64_t> GgmlRowBytes(GgmlType type, uint64_t n) {
  auto info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  if (!info) return InvalidArgumentError("unknown ggml type " + std::to_string(static_cast<int>(type)));
  if (n % info->block_values != 0) {
    return InvalidArgumentError("row of " + std::to_string(n) + " values is not a multiple of the " +
                                std::string(info->name) + " block size");
  }
  return n / info->block_values * info->block_bytes;
}

namespace {

constexpr int kQ8_0Values = 32;
constexpr int kQ4_0Values = 32;

// The smallest f16 that is >= v (v finite and >= 0): a scale rounded this way never shrinks
// the range it has to cover.
uint16_t F16RoundedUp(float v) {
  uint16_t h = F32ToF16(v);
  if (F16ToF32(h) < v && h < 0x7C00) ++h;
  return h;
}

// ---- Q8_0: value = qs[i] * d -------------------------------------------------------------

void DequantizeQ8_0(const BlockQ8_0* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQ8_0Values; ++i) {
    const float d = F16ToF32(blocks[i].d);
    for (int j = 0; j < kQ8_0Values; ++j) dst[i * kQ8_0Values + j] = blocks[i].qs[j] * d;
  }
}

// As ggml's reference: d = amax / 127, q = round(x / d).
void QuantizeQ8_0(const float* src, BlockQ8_0* blocks, int64_t n) {
  for (int64_t i = 0; i < n / kQ8_0Values; ++i) {
    const float* x = src + i * kQ8_0Values;
    float amax = 0;
    for (int j = 0; j < kQ8_0Values; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (int j = 0; j < kQ8_0Values; ++j) {
      blocks[i].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
    }
  }
}

// ---- Q4_0: value j = ((qs[j] & 0xF) - 8) * d, value j + 16 = ((qs[j] >> 4) - 8) * d -------

void DequantizeQ4_0(const BlockQ4_0* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQ4_0Values; ++i) {
    const float d = F16ToF32(blocks[i].d);
    float* y = dst + i * kQ4_0Values;
    for (int j = 0; j < 16; ++j) {
      y[j] = ((blocks[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = ((blocks[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// As ggml's reference: the value of largest magnitude maps to -8.
void QuantizeQ4_0(const float* src, BlockQ4_0* blocks, int64_t n) {
  for (int64_t i = 0; i < n / kQ4_0Values; ++i) {
    const float* x = src + i * kQ4_0Values;
    float amax = 0, max = 0;
    for (int j = 0; j < kQ4_0Values; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      blocks[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q4_K ----------------------------------------------------------------------------------
// A super-block of 256 values = 8 sub-blocks of 32. Sub-block j has a 6-bit scale sc[j] and a
// 6-bit min m[j]; value = d * sc[j] * q - dmin * m[j] with q a 4-bit quant.
// scales[12] packs them: for j < 4, sc[j] = scales[j] & 63 and m[j] = scales[j + 4] & 63; for
// j >= 4, the low 4 bits are in scales[j + 4] (sc low nibble, m high nibble) and the top 2
// bits in bits 6-7 of scales[j - 4] (sc) and scales[j] (m).
// qs: 4 chunks of 64 values; byte qs[32c + l] holds value 64c + l in its low nibble (sub-block
// 2c) and value 64c + 32 + l in its high nibble (sub-block 2c + 1).

// REQUIRES: every sc[j], m[j] < 64.
void PackScalesMinsQ4K(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[12]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// One Q4_K or Q5_K super-block: value = d * sc[j] * (q + 16 * fifth bit) - dmin * m[j], the
// fifth bits from qh (Q5_K; nullptr for Q4_K) as the Q5_K section below describes.
void DequantizeScaleMinBlock(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs,
                             const uint8_t* qh, float* y) {
  const float d = F16ToF32(d16);
  const float dmin = F16ToF32(dmin16);
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    UnpackScaleMinQ4K(2 * c, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    UnpackScaleMinQ4K(2 * c + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    const uint8_t* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      const int high1 = qh != nullptr ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
      const int high2 = qh != nullptr ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
      y[64 * c + l] = d1 * ((q[l] & 0xF) | high1) - m1;
      y[64 * c + 32 + l] = d2 * ((q[l] >> 4) | high2) - m2;
    }
  }
}

void DequantizeQ4K(const BlockQ4_K* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockQ4_K& b = blocks[i];
    DequantizeScaleMinBlock(b.d, b.dmin, b.scales, b.qs, nullptr, dst + i * kGgmlSuperBlockValues);
  }
}

// Min/max encoder: sub-block j covers [lo_j, hi_j] with lo_j = min(0, min x). The mins are
// rounded up first (so -dmin * m[j] <= lo_j), then the scales are rounded up so that
// 15 * d * sc[j] - dmin * m[j] >= hi_j; every value then rounds to a quant in range.
void QuantizeQ4KBlock(const float* x, BlockQ4_K* b) {
  float neg_lo[8], hi[8];
  float max_neg_lo = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, top = -INFINITY;
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      top = std::max(top, x[32 * j + l]);
    }
    neg_lo[j] = -lo;
    hi[j] = top;
    max_neg_lo = std::max(max_neg_lo, neg_lo[j]);
  }
  b->dmin = F16RoundedUp(max_neg_lo / 63.0f);
  const float dmin = F16ToF32(b->dmin);
  uint8_t m[8];
  float m1[8], need[8];
  float max_need = 0;
  for (int j = 0; j < 8; ++j) {
    m[j] = dmin > 0 ? static_cast<uint8_t>(std::min(63.0f, std::ceil(neg_lo[j] / dmin))) : 0;
    m1[j] = dmin * m[j];
    need[j] = std::max(0.0f, (hi[j] + m1[j]) / 15.0f);
    max_need = std::max(max_need, need[j]);
  }
  b->d = F16RoundedUp(max_need / 63.0f);
  const float d = F16ToF32(b->d);
  uint8_t sc[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? static_cast<uint8_t>(std::min(63.0f, std::ceil(need[j] / d))) : 0;
  }
  PackScalesMinsQ4K(sc, m, b->scales);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      uint8_t nibbles[2];
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;
        const float d1 = d * sc[j];
        const long q = d1 > 0 ? std::lround((x[32 * j + l] + m1[j]) / d1) : 0;
        nibbles[h] = static_cast<uint8_t>(std::clamp(q, 0L, 15L));
      }
      b->qs[32 * c + l] = static_cast<uint8_t>(nibbles[0] | (nibbles[1] << 4));
    }
  }
}

void QuantizeQ4K(const float* src, BlockQ4_K* blocks, int64_t n) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    QuantizeQ4KBlock(src + i * kGgmlSuperBlockValues, &blocks[i]);
  }
}

// ---- Q5_K ----------------------------------------------------------------------------------
// Q4_K with a fifth bit: value = d * sc[j] * (q + 16 * hbit) - dmin * m[j], scales and the low
// nibbles as Q4_K; value 64c + l (l < 32) takes its fifth bit from bit 2c of qh[l], value
// 64c + 32 + l from bit 2c + 1.

void DequantizeQ5K(const BlockQ5_K* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockQ5_K& b = blocks[i];
    DequantizeScaleMinBlock(b.d, b.dmin, b.scales, b.qs, b.qh, dst + i * kGgmlSuperBlockValues);
  }
}

// ---- Q6_K ----------------------------------------------------------------------------------
// A super-block of 256 values = 16 sub-blocks of 16, each with an int8 scale; value v =
// d * scales[v / 16] * (q - 32) with q a 6-bit quant. Two halves of 128 values; in half h,
// value 128h + 32g + l (g < 4, l < 32) has its low 4 bits in ql[64h + l + 32 * (g & 1)]
// (low nibble for g < 2, high nibble otherwise) and its top 2 bits in bits 2g..2g+1 of
// qh[32h + l].

void DequantizeQ6K(const BlockQ6_K* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockQ6_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      float* y = dst + i * kGgmlSuperBlockValues + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// Symmetric encoder: sub-block scale amax / 31 rounded up to a multiple of d, so every
// value rounds to a quant in [-31, 31].
void QuantizeQ6KBlock(const float* x, BlockQ6_K* b) {
  float scale[16];
  float max_scale = 0;
  for (int j = 0; j < 16; ++j) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
    scale[j] = amax / 31.0f;
    max_scale = std::max(max_scale, scale[j]);
  }
  b->d = F16RoundedUp(max_scale / 127.0f);
  const float d = F16ToF32(b->d);
  for (int j = 0; j < 16; ++j) {
    b->scales[j] = d > 0 ? static_cast<int8_t>(std::min(127.0f, std::ceil(scale[j] / d))) : 0;
  }
  std::fill(std::begin(b->ql), std::end(b->ql), 0);
  std::fill(std::begin(b->qh), std::end(b->qh), 0);
  for (int v = 0; v < kGgmlSuperBlockValues; ++v) {
    const float ds = d * b->scales[v / 16];
    const long q = ds > 0 ? std::clamp(std::lround(x[v] / ds), -32L, 31L) : 0;
    const int u = static_cast<int>(q) + 32;  // 0..63
    const int h = v / 128, g = (v % 128) / 32, l = v % 32;
    const int ql_index = 64 * h + l + 32 * (g & 1);
    b->ql[ql_index] |= static_cast<uint8_t>((u & 0xF) << (g < 2 ? 0 : 4));
    b->qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * g));
  }
}

void QuantizeQ6K(const float* src, BlockQ6_K* blocks, int64_t n) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    QuantizeQ6KBlock(src + i * kGgmlSuperBlockValues, &blocks[i]);
  }
}

}  // namespace

void UnpackScaleMinQ4K(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  auto info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  CHECK(info && info->can_dequantize) << "cannot dequantize " << static_cast<int>(type);
  CHECK_EQ(n % info->block_values, 0);
  switch (type) {
    case GgmlType::kF32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case GgmlType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(h[i]);
      return;
    }
    case GgmlType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(h[i]);
      return;
    }
    case GgmlType::kQ8_0: DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case GgmlType::kQ4_0: DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case GgmlType::kQ4_K: DequantizeQ4K(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case GgmlType::kQ5_K: DequantizeQ5K(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case GgmlType::kQ6_K: DequantizeQ6K(static_cast<const BlockQ6_K*>(src), dst, n); return;
    default:
      if (DecodeReadOnlyType(type, src, dst, n)) return;
      break;
  }
  CHECK(false) << "DequantizeRow: type " << GgmlTypeName(type) << " not implemented";
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  auto info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  CHECK(info) << "unknown type";
  CHECK_EQ(n % info->block_values, 0);
  switch (type) {
    case GgmlType::kF32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case GgmlType::kF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(src[i]);
      return;
    }
    case GgmlType::kBF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToBf16(src[i]);
      return;
    }
    case GgmlType::kQ8_0: QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case GgmlType::kQ4_0: QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), n); return;
    case GgmlType::kQ4_K: QuantizeQ4K(src, static_cast<BlockQ4_K*>(dst), n); return;
    case GgmlType::kQ6_K: QuantizeQ6K(src, static_cast<BlockQ6_K*>(dst), n); return;
    default: break;
  }
  CHECK(false) << "QuantizeRow: type " << GgmlTypeName(type) << " not implemented";
}

}  // namespace kvserve
