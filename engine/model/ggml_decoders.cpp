// Reference decoders of the ggml types kvserve reads but never writes: Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, IQ4_NL and IQ4_XS (ggml_decoders.h). Each follows the GGUF block layout and
// ggml's dequantization formula; tests/unit/model/ggml_decoders_test.cpp checks them against
// vectors that ggml's own decoders produced. Pure functions; thread-safe.
#include "engine/model/ggml_decoders.h"

#include <cstring>

#include "common/fp16.h"

namespace kvserve {
namespace {

constexpr int kBlockValues = 32;
constexpr int kSuperBlockValues = 256;

#pragma pack(push, 1)
struct BlockQ4_1 {
  uint16_t d, m;  // f16 scale and minimum
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // the 5th bits, value j at bit j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];  // per 16 values: scale (low nibble) and min (high nibble)
  uint8_t qs[64];      // 2-bit quants
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];   // the 3rd bits
  uint8_t qs[64];      // the low 2 bits
  uint8_t scales[12];  // 16 6-bit scales, packed
  uint16_t d;
};
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[16];  // 4-bit indices into kIq4Values
};
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;   // top 2 bits of the 8 6-bit sub-block scales
  uint8_t scales_l[4]; // low 4 bits, two per byte
  uint8_t qs[128];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIq4Nl) == 18 && sizeof(BlockIq4Xs) == 136);

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_1: value j = (low nibble of qs[j]) * d + m, value j + 16 = (high nibble) * d + m.
void DecodeQ4_1(const BlockQ4_1* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, dst += kBlockValues) {
    const float d = F16ToF32(blocks[i].d), m = F16ToF32(blocks[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = (blocks[i].qs[j] & 0xF) * d + m;
      dst[j + 16] = (blocks[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 / Q5_1: the nibbles of Q4_0 / Q4_1 with a fifth bit: bit j of qh for value j, bit
// j + 16 for value j + 16. Q5_0 is symmetric (q - 16) * d, Q5_1 q * d + m.
template <typename Block, bool kHasMin>
void DecodeQ5(const Block* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, dst += kBlockValues) {
    const Block& b = blocks[i];
    const float d = F16ToF32(b.d);
    float m = 0;
    if constexpr (kHasMin) m = F16ToF32(b.m);
    const uint32_t qh = Load32(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (b.qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      if constexpr (kHasMin) {
        dst[j] = q0 * d + m;
        dst[j + 16] = q1 * d + m;
      } else {
        dst[j] = (q0 - 16) * d;
        dst[j + 16] = (q1 - 16) * d;
      }
    }
  }
}

// Q2_K: 16 sub-blocks of 16 values, value = d * scale * q - dmin * min with 2-bit q. Each
// half of 128 values reads 32 bytes of qs; its sub-block 2s + t (s < 4 the bit pair, t the
// 16-byte half of those 32 bytes) takes bits 2s..2s+1.
void DecodeQ2K(const BlockQ2_K* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kSuperBlockValues; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = F16ToF32(b.d), dmin = F16ToF32(b.dmin);
    const uint8_t* sc = b.scales;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int t = 0; t < 2; ++t) {
          const uint8_t s = *sc++;
          const float dl = d * (s & 0xF), ml = dmin * (s >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * ((q[16 * t + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K: as Q2_K's layout for the low 2 bits, a third bit from hmask (bit k of hmask[l] for
// the k-th bit pair pass; a clear bit subtracts 4), signed 6-bit scales (minus 32) packed in
// 12 bytes: scale j's low 4 bits are nibble j of bytes 0..7, its top 2 bits bits 2(j/4).. of
// byte 8 + j % 4.
void DecodeQ3K(const BlockQ3_K* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kSuperBlockValues; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    int scales[16];
    for (int j = 0; j < 16; ++j) {
      const int low = (b.scales[j % 8] >> (4 * (j / 8))) & 0xF;
      const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = (low | (high << 4)) - 32;
    }
    int is = 0;
    uint8_t mask = 1;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
        for (int t = 0; t < 2; ++t) {
          const float dl = d * scales[is++];
          for (int l = 0; l < 16; ++l) {
            const int k = 16 * t + l;
            *dst++ = dl * (((q[k] >> shift) & 3) - ((b.hmask[k] & mask) ? 0 : 4));
          }
        }
      }
    }
  }
}

// IQ4_NL: value j = d * codebook[low nibble of qs[j]], value j + 16 the high nibble's.
void DecodeIq4Nl(const BlockIq4Nl* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, dst += kBlockValues) {
    const float d = F16ToF32(blocks[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * kIq4Values[blocks[i].qs[j] & 0xF];
      dst[j + 16] = d * kIq4Values[blocks[i].qs[j] >> 4];
    }
  }
}

// IQ4_XS: 8 IQ4_NL-like sub-blocks of 32 sharing d, each with a 6-bit scale (minus 32).
void DecodeIq4Xs(const BlockIq4Xs* blocks, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kSuperBlockValues; ++i) {
    const BlockIq4Xs& b = blocks[i];
    const float d = F16ToF32(b.d);
    for (int s = 0; s < 8; ++s, dst += kBlockValues) {
      const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * (ls - 32);
      const uint8_t* qs = b.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * kIq4Values[qs[j] & 0xF];
        dst[j + 16] = dl * kIq4Values[qs[j] >> 4];
      }
    }
  }
}

}  // namespace

bool DecodeReadOnlyType(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::kQ4_1: DecodeQ4_1(static_cast<const BlockQ4_1*>(src), dst, n); return true;
    case GgmlType::kQ5_0: DecodeQ5<BlockQ5_0, false>(static_cast<const BlockQ5_0*>(src), dst, n); return true;
    case GgmlType::kQ5_1: DecodeQ5<BlockQ5_1, true>(static_cast<const BlockQ5_1*>(src), dst, n); return true;
    case GgmlType::kQ2_K: DecodeQ2K(static_cast<const BlockQ2_K*>(src), dst, n); return true;
    case GgmlType::kQ3_K: DecodeQ3K(static_cast<const BlockQ3_K*>(src), dst, n); return true;
    case GgmlType::kIQ4_NL: DecodeIq4Nl(static_cast<const BlockIq4Nl*>(src), dst, n); return true;
    case GgmlType::kIQ4_XS: DecodeIq4Xs(static_cast<const BlockIq4Xs*>(src), dst, n); return true;
    default: return false;
  }
}

}  // namespace kvserve
