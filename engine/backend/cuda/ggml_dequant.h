// Decoders of GGUF weight blocks for the CUDA kernels, written once for host and device.
//
// GgmlBlock<T>::Decode(block, sub, &group) gives values [8 sub, 8 sub + 8) of one block of type
// T in integer form (every supported type has a multiple of 8 values per block, and 8
// consecutive values share one scale and offset): value = scale * q (+ offset). IntGroup8<T>
// and DecodeGroup8<T> (floats) do the same for values [8 g, 8 g + 8) of a row. The float
// operations are the CPU reference's (DequantizeRow, engine/model/ggml_types.cpp and
// ggml_decoders.cpp) in the same order, with rounding multiplies and adds on the device (no
// contraction into FMAs), so the values are the reference's bit for bit on both sides:
// tests/unit/backend/ggml_dequant_test.cpp checks that on the host for every type, the GPU tests
// on the device.
//
// Plain C++ when not compiled by nvcc (the host test); blocks are read byte by byte (GGUF blocks
// of 18, 22, 110 ... bytes sit at any alignment).
#pragma once

#include <cstdint>

#include "common/fp16.h"
#include "engine/model/ggml_types.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define KVSERVE_HD __host__ __device__ __forceinline__
#else
#define KVSERVE_HD inline
#endif

namespace kvserve::cuda {

KVSERVE_HD float HalfAt(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return F16ToF32(bits);
#endif
}
KVSERVE_HD uint32_t U32At(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
KVSERVE_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVSERVE_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The IQ4_NL / IQ4_XS codebook (kIq4Values in ggml_decoders.h) as bytes of two constants, so
// device code reads it from registers: entry i is byte i % 8 of kLow (i < 8) or kHigh.
KVSERVE_HD int Iq4Value(int index) {
  constexpr uint64_t kLow = 0xF6EADDCFBFAD9881ull, kHigh = 0x7159453526190D01ull;
  const uint64_t word = index < 8 ? kLow : kHigh;
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (index % 8))));
}

// Q4_K / Q5_K sub-block j's 6-bit scale and min (UnpackScaleMinQ4K).
KVSERVE_HD void ScaleMinK(int j, const uint8_t* scales, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Eight values of a block in integer form: value k = scale * q[k] (+ offset when the type has
// offsets), the very operations of the reference decoder.
struct Group8 {
  int q[8];
  float scale;
  float offset;  // 0 for types without offsets
};

template <GgmlType T>
struct GgmlBlock;

// Q8_0: d, qs[32]; value = qs[j] * d.
template <>
struct GgmlBlock<GgmlType::kQ8_0> {
  static constexpr int kValues = 32, kBytes = 34;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    for (int k = 0; k < 8; ++k) g->q[k] = static_cast<int8_t>(b[2 + 8 * sub + k]);
  }
};

// The 32-value types with nibbles: value j < 16 is the low nibble of qs[j], value j >= 16 the
// high nibble of qs[j - 16]; so values [8 sub, 8 sub + 8) are nibbles of qs[8 (sub % 2) ...].
KVSERVE_HD int Nibble(const uint8_t* qs, int sub, int k) {
  const uint8_t byte = qs[8 * (sub % 2) + k];
  return sub < 2 ? (byte & 0xF) : (byte >> 4);
}

// Q4_0: d, qs[16]; value = (q - 8) * d.
template <>
struct GgmlBlock<GgmlType::kQ4_0> {
  static constexpr int kValues = 32, kBytes = 18;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    for (int k = 0; k < 8; ++k) g->q[k] = Nibble(b + 2, sub, k) - 8;
  }
};

// Q4_1: d, m, qs[16]; value = d * q + m.
template <>
struct GgmlBlock<GgmlType::kQ4_1> {
  static constexpr int kValues = 32, kBytes = 20;
  static constexpr bool kOffset = true;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    g->offset = HalfAt(b + 2);
    for (int k = 0; k < 8; ++k) g->q[k] = Nibble(b + 4, sub, k);
  }
};

// Q5_0 / Q5_1: Q4_0 / Q4_1 nibbles with bit j of qh (little-endian u32) as value j's fifth bit.
KVSERVE_HD int Fifth(uint32_t qh, int sub, int k) { return static_cast<int>((qh >> (8 * sub + k)) & 1) << 4; }

// Q5_0: d, qh[4], qs[16]; value = d * (q - 16).
template <>
struct GgmlBlock<GgmlType::kQ5_0> {
  static constexpr int kValues = 32, kBytes = 22;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    const uint32_t qh = U32At(b + 2);
    for (int k = 0; k < 8; ++k) g->q[k] = (Nibble(b + 6, sub, k) | Fifth(qh, sub, k)) - 16;
  }
};

// Q5_1: d, m, qh[4], qs[16]; value = d * q + m.
template <>
struct GgmlBlock<GgmlType::kQ5_1> {
  static constexpr int kValues = 32, kBytes = 24;
  static constexpr bool kOffset = true;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    g->offset = HalfAt(b + 2);
    const uint32_t qh = U32At(b + 4);
    for (int k = 0; k < 8; ++k) g->q[k] = Nibble(b + 8, sub, k) | Fifth(qh, sub, k);
  }
};

// IQ4_NL: d, qs[16]; value = d * codebook[nibble].
template <>
struct GgmlBlock<GgmlType::kIQ4_NL> {
  static constexpr int kValues = 32, kBytes = 18;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    g->scale = HalfAt(b);
    for (int k = 0; k < 8; ++k) g->q[k] = Iq4Value(Nibble(b + 2, sub, k));
  }
};

// Q2_K / Q3_K: 16 sub-blocks of 16. Value r of a 128-value half h sits in bits 2s..2s+1 of
// qs[32 h + 16 t + l] with s = r / 32, t = (r / 16) % 2, l = r % 16; its sub-block is 8 h + 2 s + t.
struct KHalfPos {
  int h, s, t, l, is;
};
KVSERVE_HD KHalfPos PosK16(int sub) {
  const int v = 8 * sub;
  KHalfPos p;
  p.h = v / 128;
  const int r = v % 128;
  p.s = r / 32;
  p.t = (r / 16) % 2;
  p.l = r % 16;
  p.is = 8 * p.h + 2 * p.s + p.t;
  return p;
}

// Q2_K: scales[16], qs[64], d, dmin; value = d * (sc & 15) * q - dmin * (sc >> 4).
template <>
struct GgmlBlock<GgmlType::kQ2_K> {
  static constexpr int kValues = 256, kBytes = 84;
  static constexpr bool kOffset = true;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    const KHalfPos p = PosK16(sub);
    const int sc = b[p.is];
    g->scale = Mul(HalfAt(b + 80), static_cast<float>(sc & 0xF));
    g->offset = -Mul(HalfAt(b + 82), static_cast<float>(sc >> 4));
    const uint8_t* qs = b + 16 + 32 * p.h + 16 * p.t + p.l;
    for (int k = 0; k < 8; ++k) g->q[k] = (qs[k] >> (2 * p.s)) & 3;
  }
};

// Q3_K: hmask[32], qs[64], scales[12], d; the third bit is bit 4 h + s of hmask[16 t + l] (clear:
// minus 4); value = d * (scale6 - 32) * q.
template <>
struct GgmlBlock<GgmlType::kQ3_K> {
  static constexpr int kValues = 256, kBytes = 110;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    const KHalfPos p = PosK16(sub);
    const uint8_t* scales = b + 96;
    const int low = (scales[p.is % 8] >> (4 * (p.is / 8))) & 0xF;
    const int high = (scales[8 + p.is % 4] >> (2 * (p.is / 4))) & 3;
    g->scale = Mul(HalfAt(b + 108), static_cast<float>((low | (high << 4)) - 32));
    const uint8_t mask = static_cast<uint8_t>(1u << (4 * p.h + p.s));
    const uint8_t* qs = b + 32 + 32 * p.h + 16 * p.t + p.l;
    const uint8_t* hm = b + 16 * p.t + p.l;
    for (int k = 0; k < 8; ++k) g->q[k] = ((qs[k] >> (2 * p.s)) & 3) - ((hm[k] & mask) ? 0 : 4);
  }
};

// Q4_K / Q5_K: d, dmin, scales[12], (Q5_K: qh[32],) qs[128]. Values [64 c, 64 c + 32) are the low
// nibbles of qs[32 c ...] (sub-block 2 c), [64 c + 32, 64 c + 64) the high ones (2 c + 1); Q5_K's
// fifth bit of value l in either is bit (sub-block) of qh[l]. value = (d sc) q - (dmin m).
template <bool kFifth>
KVSERVE_HD void DecodeScaleMinK(const uint8_t* b, int sub, Group8* g) {
  const int j = sub / 4;  // sub-block of 32
  const int l0 = 8 * (sub % 4);
  int sc, m;
  ScaleMinK(j, b + 4, &sc, &m);
  g->scale = Mul(HalfAt(b), static_cast<float>(sc));
  g->offset = -Mul(HalfAt(b + 2), static_cast<float>(m));
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (kFifth ? 48 : 16) + 32 * (j / 2) + l0;
  for (int k = 0; k < 8; ++k) {
    g->q[k] = j % 2 == 0 ? (qs[k] & 0xF) : (qs[k] >> 4);
    if (kFifth) g->q[k] |= ((qh[l0 + k] >> j) & 1) << 4;
  }
}
template <>
struct GgmlBlock<GgmlType::kQ4_K> {
  static constexpr int kValues = 256, kBytes = 144;
  static constexpr bool kOffset = true;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) { DecodeScaleMinK<false>(b, sub, g); }
};
template <>
struct GgmlBlock<GgmlType::kQ5_K> {
  static constexpr int kValues = 256, kBytes = 176;
  static constexpr bool kOffset = true;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) { DecodeScaleMinK<true>(b, sub, g); }
};

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Value r of half h (128 values), quarter
// u = r / 32, l = r % 32: low 4 bits from ql[64 h + l + 32 (u % 2)] (low nibble for u < 2),
// top 2 bits (2u..2u+1) of qh[32 h + l]; value = (d * scales[8 h + l / 16 + 2 u]) * (q - 32).
template <>
struct GgmlBlock<GgmlType::kQ6_K> {
  static constexpr int kValues = 256, kBytes = 210;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    const int h = sub / 16, u = (sub / 4) % 4, l0 = 8 * (sub % 4);
    g->scale = Mul(HalfAt(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + 8 * h + l0 / 16 + 2 * u])));
    const uint8_t* ql = b + 64 * h + l0 + 32 * (u % 2);
    const uint8_t* qh = b + 128 + 32 * h + l0;
    for (int k = 0; k < 8; ++k) {
      const int low = u < 2 ? (ql[k] & 0xF) : (ql[k] >> 4);
      g->q[k] = (low | (((qh[k] >> (2 * u)) & 3) << 4)) - 32;
    }
  }
};

// IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]; 8 IQ4_NL sub-blocks of 32 with scale
// d * (6-bit scale - 32).
template <>
struct GgmlBlock<GgmlType::kIQ4_XS> {
  static constexpr int kValues = 256, kBytes = 136;
  static constexpr bool kOffset = false;
  static KVSERVE_HD void Decode(const uint8_t* b, int sub, Group8* g) {
    const int s = sub / 4;
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((scales_h >> (2 * s)) & 3) << 4);
    g->scale = Mul(HalfAt(b), static_cast<float>(ls - 32));
    for (int k = 0; k < 8; ++k) g->q[k] = Iq4Value(Nibble(b + 8 + 16 * s, sub % 4, k));
  }
};

// Values [8 g, 8 g + 8) of a row of type T in integer form.
template <GgmlType T>
KVSERVE_HD Group8 IntGroup8(const uint8_t* row, int64_t g) {
  using B = GgmlBlock<T>;
  constexpr int kGroups = B::kValues / 8;
  Group8 out;
  out.offset = 0.0f;
  B::Decode(row + (g / kGroups) * B::kBytes, static_cast<int>(g % kGroups), &out);
  return out;
}

// The same values as floats: scale * q (+ offset), as the reference decoder rounds them (a
// type without offsets adds none, so a zero keeps its sign).
template <GgmlType T>
KVSERVE_HD void DecodeGroup8(const uint8_t* row, int64_t g, float v[8]) {
  const Group8 q = IntGroup8<T>(row, g);
  for (int k = 0; k < 8; ++k) {
    const float x = Mul(q.scale, static_cast<float>(q.q[k]));
    v[k] = GgmlBlock<T>::kOffset ? Add(x, q.offset) : x;
  }
}

template <GgmlType T>
struct TypeTag {
  static constexpr GgmlType kType = T;
};

// Calls f(TypeTag<type>{}) when `type` is a quantized type the CUDA kernels read as stored and
// returns true; false for any other (F32/F16/BF16, Q8_1, Q8_K, unknown).
template <typename F>
bool VisitQuantType(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::kQ8_0: f(TypeTag<GgmlType::kQ8_0>{}); return true;
    case GgmlType::kQ4_0: f(TypeTag<GgmlType::kQ4_0>{}); return true;
    case GgmlType::kQ4_1: f(TypeTag<GgmlType::kQ4_1>{}); return true;
    case GgmlType::kQ5_0: f(TypeTag<GgmlType::kQ5_0>{}); return true;
    case GgmlType::kQ5_1: f(TypeTag<GgmlType::kQ5_1>{}); return true;
    case GgmlType::kIQ4_NL: f(TypeTag<GgmlType::kIQ4_NL>{}); return true;
    case GgmlType::kQ2_K: f(TypeTag<GgmlType::kQ2_K>{}); return true;
    case GgmlType::kQ3_K: f(TypeTag<GgmlType::kQ3_K>{}); return true;
    case GgmlType::kQ4_K: f(TypeTag<GgmlType::kQ4_K>{}); return true;
    case GgmlType::kQ5_K: f(TypeTag<GgmlType::kQ5_K>{}); return true;
    case GgmlType::kQ6_K: f(TypeTag<GgmlType::kQ6_K>{}); return true;
    case GgmlType::kIQ4_XS: f(TypeTag<GgmlType::kIQ4_XS>{}); return true;
    default: return false;
  }
}

}  // namespace kvserve::cuda
