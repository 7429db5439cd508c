#include "engine/model/ggml_types.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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
    case GgmlType::kQ4_1: return GgmlTypeInfo{"q4_1", 32, 20, false};
    case GgmlType::kQ5_0: return GgmlTypeInfo{"q5_0", 32, 22, false};
    case GgmlType::kQ5_1: return GgmlTypeInfo{"q5_1", 32, 24, false};
    case GgmlType::kQ8_1: return GgmlTypeInfo{"q8_1", 32, 36, false};
    case GgmlType::kQ2_K: return GgmlTypeInfo{"q2_k", 256, 84, false};
    case GgmlType::kQ3_K: return GgmlTypeInfo{"q3_k", 256, 110, false};
    case GgmlType::kQ4_K: return GgmlTypeInfo{"q4_k", 256, 144, true};
    case GgmlType::kQ5_K: return GgmlTypeInfo{"q5_k", 256, 176, false};
    case GgmlType::kQ6_K: return GgmlTypeInfo{"q6_k", 256, 210, true};
    case GgmlType::kQ8_K: return GgmlTypeInfo{"q8_k", 256, 292, false};
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
    case GgmlType::kQ8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float d = F16ToF32(b[i].d);
        for (int j = 0; j < 32; ++j) dst[i * 32 + j] = b[i].qs[j] * d;
      }
      return;
    }
    case GgmlType::kQ4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / 32; ++i) {
        const float d = F16ToF32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          dst[i * 32 + j] = ((b[i].qs[j] & 0xF) - 8) * d;
          dst[i * 32 + j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    default: break;
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
    case GgmlType::kQ8_0: {
      BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / 32; ++i) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[i * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = F32ToF16(d);
        for (int j = 0; j < 32; ++j) {
          b[i].qs[j] = static_cast<int8_t>(std::lround(src[i * 32 + j] * id));
        }
      }
      return;
    }
    case GgmlType::kQ4_0: {
      BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t i = 0; i < n / 32; ++i) {
        // As in the reference: the value of largest magnitude maps to -8.
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
          const float v = src[i * 32 + j];
          if (std::fabs(v) > amax) {
            amax = std::fabs(v);
            max = v;
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = F32ToF16(d);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, static_cast<int>(src[i * 32 + j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(src[i * 32 + j + 16] * id + 8.5f));
          b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    default: break;
  }
  CHECK(false) << "QuantizeRow: type " << GgmlTypeName(type) << " not implemented";
}

}  // namespace kvserve
