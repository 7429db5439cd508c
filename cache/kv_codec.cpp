#include "cache/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/fp16.h"

namespace kvserve {
namespace {

// Symmetric group quantization with an f16 scale; returns the scale actually stored.
template <int kMaxQ>
float GroupScale(const float* x, int n, uint16_t* scale_out) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t h = F32ToF16(amax / kMaxQ);
  *scale_out = h;
  return F16ToF32(h);
}

template <int kMaxQ>
int QuantizeValue(float x, float inv_scale) {
  const int q = static_cast<int>(std::nearbyint(x * inv_scale));
  return std::clamp(q, -kMaxQ, kMaxQ);
}

}  // namespace

void EncodeKvRow(KvDtype dtype, const float* src, int head_dim, int group_size, uint8_t* data,
                 uint16_t* scales) {
  switch (dtype) {
    case KvDtype::kF32: std::memcpy(data, src, sizeof(float) * head_dim); return;
    case KvDtype::kF16: {
      uint16_t* out = reinterpret_cast<uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = F32ToF16(src[i]);
      return;
    }
    case KvDtype::kBF16: {
      uint16_t* out = reinterpret_cast<uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = F32ToBf16(src[i]);
      return;
    }
    case KvDtype::kInt8: {
      CHECK_EQ(head_dim % group_size, 0);
      int8_t* out = reinterpret_cast<int8_t*>(data);
      for (int g = 0; g < head_dim / group_size; ++g) {
        const float* x = src + g * group_size;
        const float scale = GroupScale<127>(x, group_size, &scales[g]);
        const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        for (int i = 0; i < group_size; ++i) {
          out[g * group_size + i] = static_cast<int8_t>(QuantizeValue<127>(x[i], inv));
        }
      }
      return;
    }
    case KvDtype::kInt4: {
      CHECK(head_dim % group_size == 0 && group_size % 2 == 0);
      const int half = group_size / 2;
      for (int g = 0; g < head_dim / group_size; ++g) {
        const float* x = src + g * group_size;
        const float scale = GroupScale<7>(x, group_size, &scales[g]);
        const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        uint8_t* out = data + g * half;
        for (int i = 0; i < half; ++i) {
          const int lo = QuantizeValue<7>(x[i], inv) + 8;
          const int hi = QuantizeValue<7>(x[i + half], inv) + 8;
          out[i] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
  }
}

void DecodeKvRow(KvDtype dtype, const uint8_t* data, const uint16_t* scales, int head_dim,
                 int group_size, float* dst) {
  switch (dtype) {
    case KvDtype::kF32: std::memcpy(dst, data, sizeof(float) * head_dim); return;
    case KvDtype::kF16: {
      const uint16_t* in = reinterpret_cast<const uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) dst[i] = F16ToF32(in[i]);
      return;
    }
    case KvDtype::kBF16: {
      const uint16_t* in = reinterpret_cast<const uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) dst[i] = Bf16ToF32(in[i]);
      return;
    }
    case KvDtype::kInt8: {
      const int8_t* in = reinterpret_cast<const int8_t*>(data);
      for (int g = 0; g < head_dim / group_size; ++g) {
        const float scale = F16ToF32(scales[g]);
        for (int i = 0; i < group_size; ++i) dst[g * group_size + i] = in[g * group_size + i] * scale;
      }
      return;
    }
    case KvDtype::kInt4: {
      const int half = group_size / 2;
      for (int g = 0; g < head_dim / group_size; ++g) {
        const float scale = F16ToF32(scales[g]);
        const uint8_t* in = data + g * half;
        for (int i = 0; i < half; ++i) {
          dst[g * group_size + i] = ((in[i] & 0xF) - 8) * scale;
          dst[g * group_size + i + half] = ((in[i] >> 4) - 8) * scale;
        }
      }
      return;
    }
  }
}

}  // namespace kvserve
