// Integer-dot panels (kernels.h): the unsigned codes of every quantized type with their f32
// scales and offsets, packed as the integer-dot kernels read them, and the activations'
// quantization to int8. Both run once per matrix (packing) or per product (activations) in
// portable C++, so every kernel table reads the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/check.h"
#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_decoders.h"

namespace kvserve::cpu {
namespace {

struct DotLayout {
  int group;     // columns per scale
  int bits;      // 8: byte codes; 4-6: nibbles plus bits - 4 bit planes
  bool offsets;  // f32 offsets after the scales (else the kind's zero point)

  int chunk_cols() const { return bits < 8 ? 8 : 4; }
  size_t chunk_bytes() const { return 4 * kPanelRows + (bits < 8 ? 16 * (bits - 4) : 0); }
  size_t header() const { return static_cast<size_t>(offsets ? 8 : 4) * kPanelRows; }
  size_t group_bytes() const { return header() + static_cast<size_t>(group / chunk_cols()) * chunk_bytes(); }
};
DotLayout DotLayoutOf(int kind) {
  switch (kind) {
    case 10: return {32, 4, true};
    case 11: return {32, 5, true};
    case 12: return {32, 8, false};
    case 13: return {16, 4, true};
    case 14: return {16, 6, false};
    case 15: return {32, 4, false};
    case 16: return {32, 5, false};
    default: return {16, 4, false};
  }
}

// A row as value k = scale[k / G] * u[k] + offset[k / G] with unsigned codes u (G from the
// type's kind). The scales are ggml's decoder's (d * sub-block scale). The types without
// offsets of their own (Q8_0, Q4_0, Q5_0, Q6_K, Q3_K, IQ4) have offset = -zero * scale with
// their kind's zero point (kernels.h), which their panels do not store.
void DotCodes(GgmlType type, const uint8_t* row, int64_t n, uint8_t* u, float* scale, float* offset) {
  switch (type) {
    case GgmlType::kQ8_0: {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t i = 0; i < n / 32; ++i) {
        scale[i] = F16ToF32(b[i].d);
        offset[i] = -128.0f * scale[i];
        for (int j = 0; j < 32; ++j) u[32 * i + j] = static_cast<uint8_t>(b[i].qs[j] + 128);
      }
      return;
    }
    case GgmlType::kQ4_0: {
      const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row);
      for (int64_t i = 0; i < n / 32; ++i) {
        scale[i] = F16ToF32(b[i].d);
        offset[i] = -8.0f * scale[i];
        for (int j = 0; j < 16; ++j) {
          u[32 * i + j] = b[i].qs[j] & 0xF;
          u[32 * i + j + 16] = b[i].qs[j] >> 4;
        }
      }
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // Sub-block j = 2c + h of a super-block: values 64c + 32h + l, nibble h of qs[32c + l]
      // (Q5_K: plus bit j of qh[l] as the fifth bit).
      const bool q5 = type == GgmlType::kQ5_K;
      const size_t block_bytes = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      for (int64_t s = 0; s < n / 256; ++s) {
        const uint8_t* block = row + s * block_bytes;
        const BlockQ4_K& b4 = *reinterpret_cast<const BlockQ4_K*>(block);
        const BlockQ5_K& b5 = *reinterpret_cast<const BlockQ5_K*>(block);
        const uint8_t* scales = q5 ? b5.scales : b4.scales;
        const uint8_t* qs = q5 ? b5.qs : b4.qs;
        const float d = F16ToF32(q5 ? b5.d : b4.d), dmin = F16ToF32(q5 ? b5.dmin : b4.dmin);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          UnpackScaleMinQ4K(j, scales, &sc, &m);
          scale[8 * s + j] = d * sc;  // as ggml's decoder
          offset[8 * s + j] = -(dmin * m);
          const int c = j / 2, h = j % 2;
          for (int l = 0; l < 32; ++l) {
            const uint8_t q = qs[32 * c + l];
            const int low = h == 0 ? q & 0xF : q >> 4;
            u[256 * s + 32 * j + l] = static_cast<uint8_t>(low | (q5 ? ((b5.qh[l] >> j) & 1) << 4 : 0));
          }
        }
      }
      return;
    }
    case GgmlType::kQ6_K: {
      const BlockQ6_K* blocks = reinterpret_cast<const BlockQ6_K*>(row);
      for (int64_t g = 0; g < n / 16; ++g) {
        const BlockQ6_K& b = blocks[g / 16];
        scale[g] = F16ToF32(b.d) * b.scales[g % 16];  // as ggml's decoder
        offset[g] = -32.0f * scale[g];
        for (int l = 0; l < 16; ++l) {
          // Value v of the super-block: half h = v / 128, j = v % 128 = 32 q + i.
          const int v = static_cast<int>(g % 16) * 16 + l, h = v / 128, q = v % 128 / 32, i = v % 32;
          const uint8_t low = b.ql[64 * h + i + 32 * (q & 1)];
          const int nibble = q < 2 ? low & 0xF : low >> 4;
          u[16 * g + l] = static_cast<uint8_t>(nibble | ((b.qh[32 * h + i] >> (2 * q)) & 3) << 4);
        }
      }
      return;
    }
    default: {
      // The read-only types: their signed integer form (ggml_decoders.h) moved by a zero point.
      const std::optional<IntegerForm> form = IntegerFormOf(type);
      CHECK(form.has_value()) << "no integer-dot codes for " << GgmlTypeName(type);
      int zero = 128;  // IQ4_NL, IQ4_XS: codebook values in [-127, 113]
      if (type == GgmlType::kQ5_0) zero = 16;
      if (type == GgmlType::kQ3_K) zero = 4;
      if (form->has_offset) zero = 0;  // Q4_1, Q5_1, Q2_K: codes from 0
      std::vector<int8_t> q(static_cast<size_t>(n));
      DecodeIntegers(type, row, n, q.data(), scale, offset);
      for (int64_t g = 0; g < n / form->group; ++g) {
        offset[g] = (form->has_offset ? offset[g] : 0.0f) - static_cast<float>(zero) * scale[g];
      }
      for (int64_t k = 0; k < n; ++k) u[k] = static_cast<uint8_t>(q[k] + zero);
      return;
    }
  }
}

}  // namespace

int DotKind(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K: return 10;
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K: return 11;
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS: return 12;
    case GgmlType::kQ2_K: return 13;
    case GgmlType::kQ6_K: return 14;
    case GgmlType::kQ4_0: return 15;
    case GgmlType::kQ5_0: return 16;
    case GgmlType::kQ3_K: return 17;
    default: return -1;
  }
}

size_t DotPanelBytes(int kind, int64_t cols) {
  const DotLayout l = DotLayoutOf(kind);
  return (static_cast<size_t>(cols / l.group) * l.group_bytes() + 63) / 64 * 64;
}

void PackDotRows(const WeightMatrix& w, int kind, uint8_t* data, size_t panel_bytes) {
  const DotLayout l = DotLayoutOf(kind);
  std::vector<uint8_t> u(static_cast<size_t>(w.cols));
  std::vector<float> scale(static_cast<size_t>(w.cols / l.group)), offset(scale.size());
  for (int64_t r = 0; r < w.rows; ++r) {
    uint8_t* panel = data + static_cast<size_t>(r / kPanelRows) * panel_bytes;
    const int lane = static_cast<int>(r % kPanelRows);
    DotCodes(w.type, w.row(r), w.cols, u.data(), scale.data(), offset.data());
    for (int64_t g = 0; g < w.cols / l.group; ++g) {
      uint8_t* dst = panel + static_cast<size_t>(g) * l.group_bytes();
      std::memcpy(dst + lane * 4, &scale[g], 4);
      if (l.offsets) std::memcpy(dst + (kPanelRows + lane) * 4, &offset[g], 4);
      const uint8_t* src = u.data() + g * l.group;
      for (int k = 0; k < l.group; ++k) {
        // Byte lane * 4 + k % 4 of its chunk; nibble codes: the low nibble for columns k % 8 < 4,
        // and bit 4 + b in plane b's 8 bytes for that half, bit lane * 4 + k % 4.
        uint8_t* chunk = dst + l.header() + static_cast<size_t>(k / l.chunk_cols()) * l.chunk_bytes();
        const int i = lane * 4 + k % 4;
        if (l.bits == 8) {
          chunk[i] = src[k];
          continue;
        }
        const int h = k % 8 < 4 ? 0 : 1;
        chunk[i] = static_cast<uint8_t>(chunk[i] | (src[k] & 0xF) << (4 * h));
        for (int b = 0; b < l.bits - 4; ++b) {
          uint8_t* plane = chunk + 4 * kPanelRows + 16 * b + 8 * h;
          plane[i / 8] = static_cast<uint8_t>(plane[i / 8] | ((src[k] >> (4 + b)) & 1) << (i % 8));
        }
      }
    }
  }
}

int PackedMatrix::activation_block() const {
  return GetGgmlTypeInfo(static_cast<uint32_t>(type_))->block_values == 256 ? 256 : 32;
}

void QuantizedActivations::Quantize(const float* x, int64_t ldx, int num_tokens, int64_t cols, int block) {
  CHECK((block == 32 || block == 256) && cols % block == 0) << "integer-dot activations: " << cols << " / " << block;
  cols_ = cols;
  block_ = block;
  const size_t n = static_cast<size_t>(num_tokens) * cols;
  if (q_.size() < n) q_.resize(n);
  if (d_.size() < n / 32) d_.resize(n / 32);
  if (sums_.size() < n / 16) sums_.resize(n / 16);
  // Adding and subtracting 1.5 * 2^23 rounds |v| <= 2^22 to the nearest integer, ties to even.
  constexpr float kRound = 12582912.0f;
  for (int t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < cols / block; ++b) {
      const float* src = x + t * ldx + b * block;
      float amax = 0.0f, max = 0.0f;
      bool finite = true;
      for (int j = 0; j < block; ++j) {
        if (std::fabs(src[j]) > amax) amax = std::fabs(src[j]), max = src[j];
        finite = finite && std::isfinite(src[j]);
      }
      // Q8_0's and Q8_K's formulas (ggml's reference quantizers).
      float d, id;
      if (block == 32) {
        d = F16ToF32(F32ToF16(amax / 127.0f));  // Q8_0 keeps its scale in F16
        id = amax >= std::numeric_limits<float>::min() ? 127.0f / amax : 0.0f;
      } else {
        id = amax >= std::numeric_limits<float>::min() ? -127.0f / max : 0.0f;
        d = id != 0.0f ? 1.0f / id : 0.0f;
      }
      if (!finite) id = 0.0f, d = NAN;  // a non-finite input makes the products NaN
      d_[t * (cols / block) + b] = d;
      int8_t* q = q_.data() + t * cols + b * block;
      for (int j = 0; j < block; ++j) q[j] = static_cast<int8_t>(std::min((src[j] * id + kRound) - kRound, 127.0f));
      for (int s = 0; s < block / 16; ++s) {
        int32_t sum = 0;
        for (int j = 0; j < 16; ++j) sum += q[16 * s + j];
        sums_[(t * cols + b * block) / 16 + s] = sum;
      }
    }
  }
}

}  // namespace kvserve::cpu
