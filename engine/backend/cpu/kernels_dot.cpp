// Integer-dot panels (kernels.h): the unsigned codes of every quantized type with their f32
// scales and offsets, packed as the integer-dot kernels read them, and the activations'
// quantization to int8. Both run once per matrix (packing) or per product (activations) in
// portable C++, so every kernel table reads the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_decoders.h"

namespace kvserve::cpu {
namespace {

// Integer-dot panel layouts by kind (kernels.h).
struct DotLayout {
  int group;     // columns per scale
  int bits;      // 8: byte codes; 4-6: nibbles plus bits - 4 bit planes; 2-3: crumbs plus bits - 2
  bool offsets;  // offsets stored (else the kind's zero point)
  bool super;    // K panels: f32 d (and -dmin) per 256 columns, integer sc (and m) per group
  bool book = false;  // 4-bit indices into the IQ4 codebook

  // Packed codes (DotCodes): `low` bits per field, fields() per byte.
  int low() const { return bits < 4 ? 2 : 4; }
  int fields() const { return bits < 8 ? 8 / low() : 1; }
  int chunk_cols() const { return 4 * fields(); }
  size_t chunk_bytes() const { return 4 * kPanelRows + (bits < 8 ? 8 * fields() * (bits - low()) : 0); }
  size_t code_bytes() const { return static_cast<size_t>(group / chunk_cols()) * chunk_bytes(); }
  // Group panels: per group the f32 scales (and offsets), then the codes.
  size_t header() const { return static_cast<size_t>(offsets ? 8 : 4) * kPanelRows; }
  size_t group_bytes() const { return header() + code_bytes(); }
  // K panels: per super-block the f32 d (and -dmin), then per group sc (and m), then the codes.
  size_t super_group_bytes() const { return (offsets ? 2 : 1) * kPanelRows + code_bytes(); }
  size_t super_bytes() const { return header() + static_cast<size_t>(256 / group) * super_group_bytes(); }
};
DotLayout DotLayoutOf(int kind) {
  switch (kind) {
    case 10: return {32, 4, true, false};
    case 11: return {32, 5, true, false};
    case 12: return {32, 8, false, false};
    case 13: return {16, 2, true, true};
    case 14: return {16, 6, false, true};
    case 15: return {32, 4, false, false};
    case 16: return {32, 5, false, false};
    case 17: return {16, 3, false, true};
    case 18: return {32, 4, true, true};
    case 19: return {32, 5, true, true};
    default: return {32, 4, false, false, true};
  }
}

// Writes row `lane`'s codes of one group (src[0..group)) into the group's chunks.
void PutCodes(const DotLayout& l, int lane, const uint8_t* src, uint8_t* codes) {
  for (int k = 0; k < l.group; ++k) {
    // Byte lane * 4 + k % 4 of its chunk; packed codes: the low bits in field h = (k % chunk
    // columns) / 4 of that byte, and bit low + b in plane b's 8 bytes for field h, bit
    // lane * 4 + k % 4 (Q6_K: its top bits as crumbs).
    uint8_t* chunk = codes + static_cast<size_t>(k / l.chunk_cols()) * l.chunk_bytes();
    const int i = lane * 4 + k % 4;
    if (l.bits == 8) {
      chunk[i] = src[k];
      continue;
    }
    const int low = l.low(), h = k % l.chunk_cols() / 4;
    chunk[i] = static_cast<uint8_t>(chunk[i] | (src[k] & ((1 << low) - 1)) << (low * h));
    if (l.bits == 6) {  // the top two bits as one crumb (kernels.h)
      uint8_t& crumbs = chunk[4 * kPanelRows + i % 32];
      crumbs = static_cast<uint8_t>(crumbs | (src[k] >> 4) << (4 * (i / 32) + 2 * h));
      continue;
    }
    for (int b = 0; b < l.bits - low; ++b) {
      uint8_t* plane = chunk + 4 * kPanelRows + 8 * (l.fields() * b + h);
      plane[i / 8] = static_cast<uint8_t>(plane[i / 8] | ((src[k] >> (low + b)) & 1) << (i % 8));
    }
  }
}

}  // namespace

void SuperCodes(GgmlType type, const uint8_t* row, int64_t n, uint8_t* u, int8_t* sc, uint8_t* m, float* d,
                float* ndmin) {
  if (type == GgmlType::kQ6_K) {
    const BlockQ6_K* blocks = reinterpret_cast<const BlockQ6_K*>(row);
    for (int64_t g = 0; g < n / 16; ++g) {
      const BlockQ6_K& b = blocks[g / 16];
      if (g % 16 == 0) d[g / 16] = F16ToF32(b.d);
      sc[g] = b.scales[g % 16];
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
  if (type == GgmlType::kQ2_K || type == GgmlType::kQ3_K) {
    // Their integer form (ggml_decoders.h): scale = d * sc and offset = -dmin * m exactly, so
    // the quotients are the blocks' integers. Q3_K's signed codes move by its zero point 4.
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<float> scale(static_cast<size_t>(n / 16)), offset(scale.size());
    DecodeIntegers(type, row, n, q.data(), scale.data(), offset.data());
    SuperBlockScales(type, row, n, d, ndmin);
    for (int64_t g = 0; g < n / 16; ++g) {
      const float ds = d[g / 16], dm = ndmin[g / 16];
      sc[g] = static_cast<int8_t>(ds != 0.0f ? std::lround(scale[g] / ds) : 0);
      if (type == GgmlType::kQ2_K) m[g] = static_cast<uint8_t>(dm != 0.0f ? std::lround(-offset[g] / dm) : 0);
    }
    for (int64_t s = 0; s < n / 256; ++s) ndmin[s] = -ndmin[s];
    const int zero = type == GgmlType::kQ3_K ? 4 : 0;
    for (int64_t k = 0; k < n; ++k) u[k] = static_cast<uint8_t>(q[k] + zero);
    return;
  }
  // Q4_K / Q5_K: sub-block j = 2c + h of a super-block holds values 64c + 32h + l, nibble h of
  // qs[32c + l] (Q5_K: plus bit j of qh[l] as the fifth bit).
  const bool q5 = type == GgmlType::kQ5_K;
  CHECK(q5 || type == GgmlType::kQ4_K) << "no K panels for " << GgmlTypeName(type);
  const size_t block_bytes = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  for (int64_t s = 0; s < n / 256; ++s) {
    const uint8_t* block = row + s * block_bytes;
    const BlockQ4_K& b4 = *reinterpret_cast<const BlockQ4_K*>(block);
    const BlockQ5_K& b5 = *reinterpret_cast<const BlockQ5_K*>(block);
    const uint8_t* qs = q5 ? b5.qs : b4.qs;
    d[s] = F16ToF32(q5 ? b5.d : b4.d);
    ndmin[s] = -F16ToF32(q5 ? b5.dmin : b4.dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t scale, min;
      UnpackScaleMinQ4K(j, q5 ? b5.scales : b4.scales, &scale, &min);
      sc[8 * s + j] = static_cast<int8_t>(scale);  // 6 bits
      m[8 * s + j] = min;
      const int c = j / 2, h = j % 2;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q = qs[32 * c + l];
        const int low = h == 0 ? q & 0xF : q >> 4;
        u[256 * s + 32 * j + l] = static_cast<uint8_t>(low | (q5 ? ((b5.qh[l] >> j) & 1) << 4 : 0));
      }
    }
  }
}

namespace {

// A row of Q8_0, Q4_0 or a 32-value read-only type (ggml_decoders.h) as unsigned codes u and
// per 32 values ggml's decoder's scale: value k = scale[k / 32] * (u[k] - zero) with the kind's
// zero point (kernels.h), or for Q4_1/Q5_1 scale * u + offset (offset written only for them).
void DotCodes(GgmlType type, const uint8_t* row, int64_t n, uint8_t* u, float* scale, float* offset) {
  switch (type) {
    case GgmlType::kQ8_0: {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t i = 0; i < n / 32; ++i) {
        scale[i] = F16ToF32(b[i].d);
        for (int j = 0; j < 32; ++j) u[32 * i + j] = static_cast<uint8_t>(b[i].qs[j] + 128);
      }
      return;
    }
    case GgmlType::kQ4_0: {
      const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row);
      for (int64_t i = 0; i < n / 32; ++i) {
        scale[i] = F16ToF32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          u[32 * i + j] = b[i].qs[j] & 0xF;
          u[32 * i + j + 16] = b[i].qs[j] >> 4;
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
      if (form->has_offset) zero = 0;  // Q4_1, Q5_1: codes from 0, offsets of their own
      std::vector<int8_t> q(static_cast<size_t>(n));
      DecodeIntegers(type, row, n, q.data(), scale, offset);
      for (int64_t k = 0; k < n; ++k) u[k] = static_cast<uint8_t>(q[k] + zero);
      return;
    }
  }
}

}  // namespace

int DotKind(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1: return 10;
    case GgmlType::kQ5_1: return 11;
    case GgmlType::kQ8_0: return 12;
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS: return 20;
    case GgmlType::kQ2_K: return 13;
    case GgmlType::kQ6_K: return 14;
    case GgmlType::kQ4_0: return 15;
    case GgmlType::kQ5_0: return 16;
    case GgmlType::kQ3_K: return 17;
    case GgmlType::kQ4_K: return 18;
    case GgmlType::kQ5_K: return 19;
    default: return -1;
  }
}

size_t DotPanelBytes(int kind, int64_t cols) {
  const DotLayout l = DotLayoutOf(kind);
  const size_t bytes = l.super ? static_cast<size_t>(cols / 256) * l.super_bytes()
                               : static_cast<size_t>(cols / l.group) * l.group_bytes();
  return (bytes + 63) / 64 * 64;
}

void PackDotRows(const WeightMatrix& w, int kind, uint8_t* data, size_t panel_bytes) {
  const DotLayout l = DotLayoutOf(kind);
  const int64_t groups = w.cols / l.group;
  std::vector<uint8_t> u(static_cast<size_t>(w.cols)), m(static_cast<size_t>(groups));
  std::vector<int8_t> sc(static_cast<size_t>(groups));
  std::vector<float> scale(static_cast<size_t>(groups)), offset(scale.size());
  for (int64_t r = 0; r < w.rows; ++r) {
    uint8_t* panel = data + static_cast<size_t>(r / kPanelRows) * panel_bytes;
    const int lane = static_cast<int>(r % kPanelRows);
    if (!l.super) {
      DotCodes(w.type, w.row(r), w.cols, u.data(), scale.data(), offset.data());
      if (l.book) {
        // The codebook's index of each value (u = value + 128 here).
        for (uint8_t& c : u) c = static_cast<uint8_t>(std::find(kIq4Values, kIq4Values + 16, c - 128) - kIq4Values);
      }
      for (int64_t g = 0; g < groups; ++g) {
        uint8_t* dst = panel + static_cast<size_t>(g) * l.group_bytes();
        std::memcpy(dst + lane * 4, &scale[g], 4);
        if (l.offsets) std::memcpy(dst + (kPanelRows + lane) * 4, &offset[g], 4);
        PutCodes(l, lane, u.data() + g * l.group, dst + l.header());
      }
      continue;
    }
    // scale and offset hold d and -dmin per super-block here.
    SuperCodes(w.type, w.row(r), w.cols, u.data(), sc.data(), m.data(), scale.data(), offset.data());
    for (int64_t s = 0; s < w.cols / 256; ++s) {
      uint8_t* dst = panel + static_cast<size_t>(s) * l.super_bytes();
      std::memcpy(dst + lane * 4, &scale[s], 4);
      if (l.offsets) std::memcpy(dst + (kPanelRows + lane) * 4, &offset[s], 4);
      for (int j = 0; j < 256 / l.group; ++j) {
        const int64_t g = s * (256 / l.group) + j;
        uint8_t* group = dst + l.header() + static_cast<size_t>(j) * l.super_group_bytes();
        group[lane] = static_cast<uint8_t>(sc[g]);
        if (l.offsets) group[kPanelRows + lane] = m[g];
        PutCodes(l, lane, u.data() + g * l.group, group + (l.offsets ? 2 : 1) * kPanelRows);
      }
    }
  }
}

int PackedMatrix::activation_block() const {
  return GetGgmlTypeInfo(static_cast<uint32_t>(type_))->block_values == 256 ? 256 : 32;
}

void QuantizedActivations::Quantize(const float* x, int64_t ldx, int num_tokens, int64_t cols, int block,
                                    int threads) {
  CHECK((block == 32 || block == 256) && cols % block == 0) << "integer-dot activations: " << cols << " / " << block;
  cols_ = cols;
  block_ = block;
  const size_t n = static_cast<size_t>(num_tokens) * cols;
  if (q_.size() < n) q_.resize(n);
  if (d_.size() < n / 32) d_.resize(n / 32);
  if (sums_.size() < n / 16) sums_.resize(n / 16);
  const int64_t blocks = cols / block;
  const auto quantize_block = Kernels().quantize_block;
  // Tokens are independent: a prompt's split across the threads, with the same bits.
#pragma omp parallel for schedule(static) if (threads > 1) num_threads(threads)
  for (int t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      quantize_block(x + t * ldx + b * block, block, q_.data() + t * cols + b * block, &d_[t * blocks + b],
                     &sums_[(t * cols + b * block) / 16]);
    }
  }
}

}  // namespace kvserve::cpu
