// Reference decoders of the ggml types kvserve reads but never writes: Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, IQ4_NL and IQ4_XS (ggml_decoders.h). Each follows the GGUF block layout and
// ggml's dequantization formula, split in two: the integer form (codes, scales, offsets) that
// the CPU kernels pack, and the float operations that make values of it; tests/unit/model/ggml_decoders_test.cpp checks them against
// vectors that ggml's own decoders produced. Pure functions; thread-safe.
#include "engine/model/ggml_decoders.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/fp16.h"

namespace kvserve {
namespace {

constexpr int kBlockValues = 32;

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

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_1: value j = (low nibble of qs[j]) * d + m, value j + 16 = (high nibble) * d + m.
void IntegersQ4_1(const BlockQ4_1* blocks, int64_t n, int8_t* q, float* scale, float* offset) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, q += kBlockValues) {
    scale[i] = F16ToF32(blocks[i].d);
    offset[i] = F16ToF32(blocks[i].m);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(blocks[i].qs[j] & 0xF);
      q[j + 16] = static_cast<int8_t>(blocks[i].qs[j] >> 4);
    }
  }
}

// Q5_0 / Q5_1: the nibbles of Q4_0 / Q4_1 with a fifth bit: bit j of qh for value j, bit
// j + 16 for value j + 16. Q5_0 is symmetric (q - 16) * d, Q5_1 q * d + m.
template <typename Block, bool kHasMin>
void IntegersQ5(const Block* blocks, int64_t n, int8_t* q, float* scale, float* offset) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, q += kBlockValues) {
    const Block& b = blocks[i];
    scale[i] = F16ToF32(b.d);
    if constexpr (kHasMin) offset[i] = F16ToF32(b.m);
    const int zero = kHasMin ? 0 : 16;
    const uint32_t qh = Load32(b.qh);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - zero);
      q[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - zero);
    }
  }
}

// Q2_K: 16 sub-blocks of 16 values, value = d * scale * q - dmin * min with 2-bit q. Each
// half of 128 values reads 32 bytes of qs; its sub-block 2s + t (s < 4 the bit pair, t the
// 16-byte half of those 32 bytes) takes bits 2s..2s+1.
void IntegersQ2K(const BlockQ2_K* blocks, int64_t n, int8_t* q, float* scale, float* offset) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = F16ToF32(b.d), dmin = F16ToF32(b.dmin);
    const uint8_t* sc = b.scales;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qs = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int t = 0; t < 2; ++t, ++sc) {
          *scale++ = d * (*sc & 0xF);
          *offset++ = -(dmin * (*sc >> 4));
          for (int l = 0; l < 16; ++l) *q++ = static_cast<int8_t>((qs[16 * t + l] >> shift) & 3);
        }
      }
    }
  }
}

// Q3_K: as Q2_K's layout for the low 2 bits, a third bit from hmask (bit k of hmask[l] for
// the k-th bit pair pass; a clear bit subtracts 4), signed 6-bit scales (minus 32) packed in
// 12 bytes: scale j's low 4 bits are nibble j of bytes 0..7, its top 2 bits bits 2(j/4).. of
// byte 8 + j % 4.
void IntegersQ3K(const BlockQ3_K* blocks, int64_t n, int8_t* q, float* scale) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    int is = 0;
    uint8_t mask = 1;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qs = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
        for (int t = 0; t < 2; ++t, ++is) {
          const int low = (b.scales[is % 8] >> (4 * (is / 8))) & 0xF;
          const int high = (b.scales[8 + is % 4] >> (2 * (is / 4))) & 3;
          *scale++ = d * ((low | (high << 4)) - 32);
          for (int l = 0; l < 16; ++l) {
            const int k = 16 * t + l;
            *q++ = static_cast<int8_t>(((qs[k] >> shift) & 3) - ((b.hmask[k] & mask) ? 0 : 4));
          }
        }
      }
    }
  }
}

// IQ4_NL: value j = d * codebook[low nibble of qs[j]], value j + 16 the high nibble's.
void IntegersIq4Nl(const BlockIq4Nl* blocks, int64_t n, int8_t* q, float* scale) {
  for (int64_t i = 0; i < n / kBlockValues; ++i, q += kBlockValues) {
    scale[i] = F16ToF32(blocks[i].d);
    for (int j = 0; j < 16; ++j) {
      q[j] = kIq4Values[blocks[i].qs[j] & 0xF];
      q[j + 16] = kIq4Values[blocks[i].qs[j] >> 4];
    }
  }
}

// IQ4_XS: 8 IQ4_NL-like sub-blocks of 32 sharing d, each with a 6-bit scale (minus 32).
void IntegersIq4Xs(const BlockIq4Xs* blocks, int64_t n, int8_t* q, float* scale) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    const BlockIq4Xs& b = blocks[i];
    const float d = F16ToF32(b.d);
    for (int s = 0; s < 8; ++s, q += kBlockValues) {
      const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
      *scale++ = d * (ls - 32);
      const uint8_t* qs = b.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        q[j] = kIq4Values[qs[j] & 0xF];
        q[j + 16] = kIq4Values[qs[j] >> 4];
      }
    }
  }
}

}  // namespace

std::optional<IntegerForm> IntegerFormOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: return IntegerForm{kBlockValues, true, false};
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL: return IntegerForm{kBlockValues, false, true};
    case GgmlType::kIQ4_XS: return IntegerForm{kBlockValues, false, false};
    case GgmlType::kQ2_K: return IntegerForm{16, true, false};
    case GgmlType::kQ3_K: return IntegerForm{16, false, false};
    default: return std::nullopt;
  }
}

void DecodeIntegers(GgmlType type, const void* src, int64_t n, int8_t* q, float* scale, float* offset) {
  switch (type) {
    case GgmlType::kQ4_1: IntegersQ4_1(static_cast<const BlockQ4_1*>(src), n, q, scale, offset); return;
    case GgmlType::kQ5_0: IntegersQ5<BlockQ5_0, false>(static_cast<const BlockQ5_0*>(src), n, q, scale, offset); return;
    case GgmlType::kQ5_1: IntegersQ5<BlockQ5_1, true>(static_cast<const BlockQ5_1*>(src), n, q, scale, offset); return;
    case GgmlType::kQ2_K: IntegersQ2K(static_cast<const BlockQ2_K*>(src), n, q, scale, offset); return;
    case GgmlType::kQ3_K: IntegersQ3K(static_cast<const BlockQ3_K*>(src), n, q, scale); return;
    case GgmlType::kIQ4_NL: IntegersIq4Nl(static_cast<const BlockIq4Nl*>(src), n, q, scale); return;
    case GgmlType::kIQ4_XS: IntegersIq4Xs(static_cast<const BlockIq4Xs*>(src), n, q, scale); return;
    default: CHECK(false) << "no integer form for " << GgmlTypeName(type);
  }
}

void SuperBlockScales(GgmlType type, const void* src, int64_t n, float* d, float* dmin) {
  for (int64_t i = 0; i < n / kGgmlSuperBlockValues; ++i) {
    if (type == GgmlType::kQ2_K) {
      d[i] = F16ToF32(static_cast<const BlockQ2_K*>(src)[i].d);
      dmin[i] = F16ToF32(static_cast<const BlockQ2_K*>(src)[i].dmin);
    } else {
      CHECK(type == GgmlType::kQ3_K) << "no super-block scales for " << GgmlTypeName(type);
      d[i] = F16ToF32(static_cast<const BlockQ3_K*>(src)[i].d);
      dmin[i] = 0.0f;
    }
  }
}

bool DecodeReadOnlyType(GgmlType type, const void* src, float* dst, int64_t n) {
  const std::optional<IntegerForm> form = IntegerFormOf(type);
  if (!form) return false;
  // In pieces of one super-block (a multiple of every block size here), on the stack: the
  // embedding lookup decodes a row per token.
  const int block_values = GetGgmlTypeInfo(static_cast<uint32_t>(type))->block_values;
  const size_t block_bytes = GetGgmlTypeInfo(static_cast<uint32_t>(type))->block_bytes;
  int8_t q[kGgmlSuperBlockValues];
  float scale[kGgmlSuperBlockValues / 16], offset[kGgmlSuperBlockValues / 16];
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t done = 0; done < n; done += kGgmlSuperBlockValues) {
    const int64_t m = std::min<int64_t>(kGgmlSuperBlockValues, n - done);
    DecodeIntegers(type, bytes + done / block_values * block_bytes, m, q, scale, offset);
    for (int64_t k = 0; k < m; ++k) {
      const int64_t g = k / form->group;
      dst[done + k] = form->has_offset ? scale[g] * q[k] + offset[g] : scale[g] * q[k];
    }
  }
  return true;
}

}  // namespace kvserve
