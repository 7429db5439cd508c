#include "engine/backend/cpu/kernels.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "common/log.h"
#include "engine/model/ggml_decoders.h"

namespace kvserve::cpu {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang before 16 does not know
// __builtin_cpu_supports("f16c"). The AVX state it needs is implied by the AVX2/AVX-512 checks.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1) != 0;
}
bool CpuHasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && CpuHasF16c();
}
// Every CPU with AVX512-BF16 has AVX512-VNNI too; the table relies on both.
bool CpuHasAvx512Bf16() {
  // GFNI too (Sapphire Rapids, Zen 4 on): only Cooper Lake lacks it, and takes the AVX-512 table.
  return CpuHasAvx512() && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("gfni");
}
bool CpuHasAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c(); }
// AVX-VNNI from CPUID leaf 7, subleaf 1 (EAX bit 4): older compilers do not know the name.
bool CpuHasAvxVnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return CpuHasAvx2() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && ((eax >> 4) & 1) != 0;
}

const KernelTable& ChooseKernels() {
  if (const char* forced = std::getenv("KVSERVE_ISA")) {
    if (const KernelTable* t = KernelsFor(forced)) return *t;
    LOG_WARN("KVSERVE_ISA={} is not available on this CPU; choosing automatically", forced);
  }
  if (CpuHasAvx512Bf16()) return Avx512Bf16Kernels();
  if (CpuHasAvx512()) return Avx512Kernels();
  if (CpuHasAvxVnni()) return AvxVnniKernels();
  if (CpuHasAvx2()) return Avx2Kernels();
  return GenericKernels();
}

// RoundToBf16's rounding of one value (branch-free, so loops of it vectorise).
inline uint16_t RoundBf16(float f) {
  const uint32_t u = BitsFromF32(f);
  const uint32_t abs = u & 0x7FFFFFFF;
  uint32_t r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;  // nearest even
  r = abs > 0x7F800000 ? (u >> 16) | 0x40 : r;         // NaN: quiet
  r = abs < 0x00800000 ? (u >> 16) & 0x8000 : r;       // subnormal: signed zero
  return static_cast<uint16_t>(r);
}

// Panels of the types packed from their integer form (ggml_decoders.h), by kind: per group of
// kCols columns the 16 rows' scales (f16 for kind 3, else f32), their f32 offsets (kinds 8 and
// 9), then [kCols][16] int8 values.
struct IntegerPanel {
  int cols;          // columns per group
  int scale_bytes;   // 2 or 4
  bool has_offset;
  size_t header() const { return static_cast<size_t>(kPanelRows) * scale_bytes * (has_offset ? 2 : 1); }
  size_t group_bytes() const { return header() + static_cast<size_t>(cols) * kPanelRows; }
};
IntegerPanel IntegerPanelOf(int kind) {
  switch (kind) {
    case 3: return {32, 2, false};
    case 7: return {16, 4, false};
    case 8: return {32, 4, true};
    default: return {16, 4, true};
  }
}
// The panel kind that holds a type's integer form exactly: f16 scales per 32 as Q8_0's, scales
// per 16 (a 32-column scale written twice) as Q6_K's, scales and offsets per 32 as Q5_K's, and
// per 16 in their own kind.
int IntegerKind(const IntegerForm& f) {
  if (f.has_offset) return f.group == 32 ? 8 : kOffset16Kind;
  return f.group == 32 && f.f16_scales ? 3 : 7;
}

void PackIntegerRows(const WeightMatrix& w, const IntegerForm& form, int kind, uint8_t* data, size_t panel_bytes) {
  const IntegerPanel layout = IntegerPanelOf(kind);
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  std::vector<float> scale(static_cast<size_t>(w.cols / form.group)), offset(scale.size());
  for (int64_t r = 0; r < w.rows; ++r) {
    uint8_t* panel = data + static_cast<size_t>(r / kPanelRows) * panel_bytes;
    const int lane = static_cast<int>(r % kPanelRows);
    DecodeIntegers(w.type, w.row(r), w.cols, q.data(), scale.data(), offset.data());
    for (int64_t g = 0; g < w.cols / layout.cols; ++g) {
      uint8_t* dst = panel + static_cast<size_t>(g) * layout.group_bytes();
      const int64_t s = g * layout.cols / form.group;
      if (layout.scale_bytes == 2) {
        const uint16_t h = F32ToF16(scale[s]);  // exact: the scale is the block's f16 d
        std::memcpy(dst + lane * 2, &h, 2);
      } else {
        std::memcpy(dst + lane * 4, &scale[s], 4);
      }
      if (layout.has_offset) std::memcpy(dst + (kPanelRows + lane) * 4, &offset[s], 4);
      for (int l = 0; l < layout.cols; ++l) {
        dst[layout.header() + l * kPanelRows + lane] = static_cast<uint8_t>(q[g * layout.cols + l]);
      }
    }
  }
}

}  // namespace

void RoundToBf16(const float* x, int64_t ldx, int num_tokens, int64_t cols, uint16_t* xb, int64_t ldxb) {
  for (int t = 0; t < num_tokens; ++t) {
    const float* src = x + t * ldx;
    uint16_t* dst = xb + t * ldxb;
    for (int64_t k = 0; k < cols; ++k) dst[k] = RoundBf16(src[k]);
    if (cols % 2 != 0) dst[cols] = 0;
  }
}

void PackedMatrix::AllocateZeroed() {
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, nbytes())));
  CHECK(data_ != nullptr) << "out of memory packing a " << rows_ << "x" << cols_ << " matrix";
  std::memset(data_.get(), 0, nbytes());
}

PackedMatrix::PackedMatrix(const WeightMatrix& w, ComputeDtype compute)
    : type_(w.type), kind_(WeightKind(w.type)), rows_(w.rows), cols_(w.cols) {
  CHECK(kind_ >= 0) << "cannot pack " << GgmlTypeName(w.type);
  num_panels_ = (rows_ + kPanelRows - 1) / kPanelRows;
  if (compute != ComputeDtype::kF32 && DotKind(w.type) >= 0) {
    kind_ = DotKind(w.type);
    panel_bytes_ = DotPanelBytes(kind_, cols_);
    AllocateZeroed();
    PackDotRows(w, kind_, data_.get(), panel_bytes_);
    codes_symmetric_ = w.type == GgmlType::kQ8_0;
    for (int64_t r = 0; r < rows_ && codes_symmetric_; ++r) {
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w.row(r));
      for (int64_t b = 0; b < cols_ / 32; ++b) codes_symmetric_ &= std::ranges::count(blocks[b].qs, int8_t{-128}) == 0;
    }
    return;
  }
  if (compute == ComputeDtype::kBF16 && kind_ <= 2) {
    kind_ = kBf16PairKind;
    const int64_t pairs = (cols_ + 1) / 2;
    panel_bytes_ = (static_cast<size_t>(pairs) * kPanelRows * 4 + 63) / 64 * 64;
    AllocateZeroed();
    // Each row decoded to F32, then rounded as the activations are.
    std::vector<float> values(static_cast<size_t>(cols_));
    std::vector<uint16_t> rounded(static_cast<size_t>(cols_) + 1);
    for (int64_t r = 0; r < rows_; ++r) {
      uint16_t* panel = reinterpret_cast<uint16_t*>(data_.get() + static_cast<size_t>(r / kPanelRows) * panel_bytes_);
      const int lane = static_cast<int>(r % kPanelRows);
      DequantizeRow(w.type, w.row(r), values.data(), cols_);
      RoundToBf16(values.data(), cols_, 1, cols_, rounded.data(), cols_ + 1);
      for (int64_t k = 0; k < cols_; ++k) panel[((k / 2) * kPanelRows + lane) * 2 + k % 2] = rounded[k];
    }
    return;
  }
  if (const std::optional<IntegerForm> form = IntegerFormOf(w.type)) {
    const IntegerPanel layout = IntegerPanelOf(kind_);
    panel_bytes_ = (static_cast<size_t>(cols_ / layout.cols) * layout.group_bytes() + 63) / 64 * 64;
    AllocateZeroed();
    PackIntegerRows(w, *form, kind_, data_.get(), panel_bytes_);
    return;
  }
  const size_t value_bytes = w.type == GgmlType::kF32 ? 4 : 2;
  const bool q8 = w.type == GgmlType::kQ8_0, q4 = w.type == GgmlType::kQ4_0, q4k = w.type == GgmlType::kQ4_K;
  const bool q6k = w.type == GgmlType::kQ6_K, q5k = w.type == GgmlType::kQ5_K;
  // Q5_K: per 32-column sub-block, [16] f32 scales, [16] f32 offsets, [32][16] int8 values.
  const size_t q5k_group_bytes = 8 * kPanelRows + 32 * kPanelRows;
  // Q6_K: per 16-column sub-block, [16] f32 scales, [16][16] int8 values.
  const size_t q6k_group_bytes = 4 * kPanelRows + 16 * kPanelRows;
  // Quantized: per 32-column block, 16 f16 scales, then the values (32 or 16 bytes per row).
  const size_t block_bytes = kPanelRows * 2 + (q8 ? 32 : 16) * kPanelRows;
  // Q4_K: per 64-column chunk, [2][16] f32 scales, [2][16] f32 offsets, [32][16] bytes.
  const size_t chunk_bytes = 4 * 4 * kPanelRows + 32 * kPanelRows;
  if (q8 || q4) {
    panel_bytes_ = static_cast<size_t>(cols_ / 32) * block_bytes;
  } else if (q4k) {
    panel_bytes_ = static_cast<size_t>(cols_ / 64) * chunk_bytes;
  } else if (q6k) {
    panel_bytes_ = static_cast<size_t>(cols_ / 16) * q6k_group_bytes;
  } else if (q5k) {
    panel_bytes_ = static_cast<size_t>(cols_ / 32) * q5k_group_bytes;
  } else {
    panel_bytes_ = static_cast<size_t>(cols_) * kPanelRows * value_bytes;
  }
  panel_bytes_ = (panel_bytes_ + 63) / 64 * 64;
  AllocateZeroed();
  std::vector<uint8_t> codes(q5k || q6k ? cols_ : 0), mins(codes.size() / 16);
  std::vector<int8_t> sc(mins.size());
  std::vector<float> d(codes.size() / 256), ndmin(d.size());
  for (int64_t r = 0; r < rows_; ++r) {
    uint8_t* panel = data_.get() + static_cast<size_t>(r / kPanelRows) * panel_bytes_;
    const int lane = static_cast<int>(r % kPanelRows);
    const uint8_t* row = w.row(r);
    if (q8) {
      const BlockQ8_0* blocks = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t b = 0; b < cols_ / 32; ++b) {
        uint8_t* dst = panel + static_cast<size_t>(b) * block_bytes;
        std::memcpy(dst + lane * 2, &blocks[b].d, 2);
        for (int k = 0; k < 32; ++k) dst[kPanelRows * 2 + k * kPanelRows + lane] = static_cast<uint8_t>(blocks[b].qs[k]);
      }
    } else if (q4) {
      const BlockQ4_0* blocks = reinterpret_cast<const BlockQ4_0*>(row);
      for (int64_t b = 0; b < cols_ / 32; ++b) {
        uint8_t* dst = panel + static_cast<size_t>(b) * block_bytes;
        std::memcpy(dst + lane * 2, &blocks[b].d, 2);
        for (int k = 0; k < 16; ++k) dst[kPanelRows * 2 + k * kPanelRows + lane] = blocks[b].qs[k];
      }
    } else if (q4k) {
      const BlockQ4_K* blocks = reinterpret_cast<const BlockQ4_K*>(row);
      for (int64_t c = 0; c < cols_ / 64; ++c) {
        const BlockQ4_K& b = blocks[c / 4];
        const int chunk = static_cast<int>(c % 4);
        uint8_t* dst = panel + static_cast<size_t>(c) * chunk_bytes;
        for (int h = 0; h < 2; ++h) {
          uint8_t sc, m;
          UnpackScaleMinQ4K(2 * chunk + h, b.scales, &sc, &m);
          const float scale = F16ToF32(b.d) * sc;  // as ggml's decoder
          const float offset = 8.0f * scale - F16ToF32(b.dmin) * m;
          std::memcpy(dst + (h * kPanelRows + lane) * 4, &scale, 4);
          std::memcpy(dst + ((2 + h) * kPanelRows + lane) * 4, &offset, 4);
        }
        for (int l = 0; l < 32; ++l) dst[4 * 4 * kPanelRows + l * kPanelRows + lane] = b.qs[32 * chunk + l];
      }
    } else if (q5k || q6k) {
      // The blocks' integers (SuperCodes); scale d * sc and offset -dmin * m as ggml's decoder.
      SuperCodes(w.type, row, cols_, codes.data(), sc.data(), mins.data(), d.data(), ndmin.data());
      const int group = q5k ? 32 : 16;
      for (int64_t g = 0; g < cols_ / group; ++g) {
        uint8_t* dst = panel + static_cast<size_t>(g) * (q5k ? q5k_group_bytes : q6k_group_bytes);
        const float scale = d[g * group / 256] * sc[g];
        std::memcpy(dst + lane * 4, &scale, 4);
        if (q5k) {
          const float offset = ndmin[g / 8] * mins[g];
          std::memcpy(dst + (kPanelRows + lane) * 4, &offset, 4);
        }
        uint8_t* values = dst + (q5k ? 8 : 4) * kPanelRows;
        for (int l = 0; l < group; ++l) {
          const int u = codes[g * group + l];
          values[l * kPanelRows + lane] = static_cast<uint8_t>(static_cast<int8_t>(q5k ? u : u - 32));
        }
      }
    } else {
      for (int64_t k = 0; k < cols_; ++k) {
        std::memcpy(panel + (static_cast<size_t>(k) * kPanelRows + lane) * value_bytes, row + k * value_bytes,
                    value_bytes);
      }
    }
  }
}

int WeightKind(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ8_0: return 3;
    case GgmlType::kQ4_0: return 4;
    case GgmlType::kQ4_K: return 5;
    case GgmlType::kQ6_K: return 7;
    case GgmlType::kQ5_K: return 8;
    default: {
      const std::optional<IntegerForm> form = IntegerFormOf(type);
      return form ? IntegerKind(*form) : -1;
    }
  }
}

const KernelTable& Kernels() {
  static const KernelTable& table = ChooseKernels();
  return table;
}

bool CpuHasBf16Dot() { return CpuHasAvx512Bf16(); }

ComputeDtype AutoComputeDtype() {
  static const ComputeDtype chosen = [] {
    if (!CpuHasBf16Dot()) return ComputeDtype::kInt8;
    const double speedup = Bf16DotSpeedup();
    LOG_INFO("compute dtype auto: BF16 pair products run at {:.2f}x the F32 multiply-add rate here: {}", speedup,
             speedup >= 1.5 ? "bf16" : "int8");
    return speedup >= 1.5 ? ComputeDtype::kBF16 : ComputeDtype::kInt8;
  }();
  return chosen;
}

const KernelTable* KernelsFor(std::string_view isa) {
  if (isa == "generic") return &GenericKernels();
  if (isa == "avx512bf16") return CpuHasAvx512Bf16() ? &Avx512Bf16Kernels() : nullptr;
  if (isa == "avx2") return CpuHasAvx2() ? &Avx2Kernels() : nullptr;
  if (isa == "avxvnni") return CpuHasAvxVnni() ? &AvxVnniKernels() : nullptr;
  if (isa == "avx512") return CpuHasAvx512() ? &Avx512Kernels() : nullptr;
  return nullptr;
}

}  // namespace kvserve::cpu
