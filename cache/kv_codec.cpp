#include "cache/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "common/fp16.h"

namespace kvserve {
namespace {

// Asymmetric group quantization: codes q in [kLo, kHi] stand for q * scale + bias. scale and
// bias are rounded to f16 and stored as params[0], params[1]; the codes are computed against the
// rounded values. bias = min + (-kLo) * scale is exact in float before its f16 rounding (-kLo is
// a power of two), so a fused or unfused multiply-add gives the same bias on every backend.
template <int kLo, int kHi>
struct GroupCode {
  GroupCode(const float* x, int n, uint16_t* params) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    params[0] = F32ToF16((hi - lo) / static_cast<float>(kHi - kLo));
    scale = F16ToF32(params[0]);
    params[1] = F32ToF16(lo + static_cast<float>(-kLo) * scale);
    bias = F16ToF32(params[1]);
    inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  }
  int Quantize(float x) const {
    return std::clamp(static_cast<int>(std::nearbyint((x - bias) * inv)), kLo, kHi);
  }
  float scale, bias, inv;
};

constexpr int kMaxRows = 1024;  // KvSpec's largest block

float Dequantize(int q, const uint16_t* params) {
  return std::fma(static_cast<float>(q), F16ToF32(params[0]), F16ToF32(params[1]));
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
        const GroupCode<-128, 127> code(x, group_size, &scales[kKvParamsPerGroup * g]);
        for (int i = 0; i < group_size; ++i) out[g * group_size + i] = static_cast<int8_t>(code.Quantize(x[i]));
      }
      return;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4C: {
      CHECK(head_dim % group_size == 0 && group_size % 2 == 0);
      const int half = group_size / 2;
      for (int g = 0; g < head_dim / group_size; ++g) {
        const float* x = src + g * group_size;
        const GroupCode<-8, 7> code(x, group_size, &scales[kKvParamsPerGroup * g]);
        uint8_t* out = data + g * half;
        for (int i = 0; i < half; ++i) {
          const int lo = code.Quantize(x[i]) + 8;
          const int hi = code.Quantize(x[i + half]) + 8;
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
        const uint16_t* params = &scales[kKvParamsPerGroup * g];
        for (int i = 0; i < group_size; ++i) dst[g * group_size + i] = Dequantize(in[g * group_size + i], params);
      }
      return;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4C: {
      const int half = group_size / 2;
      for (int g = 0; g < head_dim / group_size; ++g) {
        const uint16_t* params = &scales[kKvParamsPerGroup * g];
        const uint8_t* in = data + g * half;
        for (int i = 0; i < half; ++i) {
          dst[g * group_size + i] = Dequantize((in[i] & 0xF) - 8, params);
          dst[g * group_size + i + half] = Dequantize((in[i] >> 4) - 8, params);
        }
      }
      return;
    }
  }
}

void EncodeKvKeysPerChannel(const float* rows, int num_rows, int head_dim, int group_size,
                            uint8_t* data, uint16_t* channel_params) {
  CHECK(num_rows > 0 && num_rows <= kMaxRows && head_dim % group_size == 0 && group_size % 2 == 0);
  const size_t row_bytes = KvRowDataBytes(KvDtype::kInt4, head_dim);
  const int half = group_size / 2;
  float column[kMaxRows];
  for (int c = 0; c < head_dim; ++c) {
    for (int r = 0; r < num_rows; ++r) column[r] = rows[static_cast<size_t>(r) * head_dim + c];
    const GroupCode<-8, 7> code(column, num_rows, &channel_params[kKvParamsPerGroup * c]);
    // Channel c sits in group c / G at nibble position c % G: low nibble of byte c % G for the
    // group's first half, high nibble of byte c % G - G/2 for its second.
    const int in_group = c % group_size;
    const size_t byte = static_cast<size_t>(c / group_size) * half + in_group % half;
    const int shift = in_group < half ? 0 : 4;
    for (int r = 0; r < num_rows; ++r) {
      uint8_t& b = data[r * row_bytes + byte];
      b = static_cast<uint8_t>((b & ~(0xF << shift)) | ((code.Quantize(column[r]) + 8) << shift));
    }
  }
}

void DecodeKvKeyRowPerChannel(const uint8_t* row_data, const uint16_t* channel_params, int head_dim,
                              int group_size, float* dst) {
  const int half = group_size / 2;
  for (int c = 0; c < head_dim; ++c) {
    const int in_group = c % group_size;
    const uint8_t b = row_data[static_cast<size_t>(c / group_size) * half + in_group % half];
    const int q = (in_group < half ? (b & 0xF) : (b >> 4)) - 8;
    dst[c] = Dequantize(q, &channel_params[kKvParamsPerGroup * c]);
  }
}

namespace {

struct SegmentPtrs {
  size_t row_bytes;
  int params_per_row;
  size_t data_offset;
  size_t scales_offset;
};

SegmentPtrs Segment(const KvSpec& spec, int layer, int kind, int head) {
  const size_t off = spec.segment_offset(layer, kind, head);
  return {spec.row_bytes(layer, head), spec.params_per_row(), off, off + spec.scales_offset(layer, head)};
}

}  // namespace

void DecodeKvSegment(const KvSpec& spec, const uint8_t* block, int layer, int kind, int head, float* rows) {
  const KvDtype d = spec.dtype(layer, head);
  const int hd = spec.head_dim();
  const SegmentPtrs p = Segment(spec, layer, kind, head);
  const auto* scales = reinterpret_cast<const uint16_t*>(block + p.scales_offset);
  for (int r = 0; r < spec.block_size(); ++r) {
    const uint8_t* data = block + p.data_offset + r * p.row_bytes;
    if (kind == 0 && KeysPerChannel(d)) {
      DecodeKvKeyRowPerChannel(data, scales, hd, spec.group_size(), rows + static_cast<size_t>(r) * hd);
    } else {
      DecodeKvRow(d, data, scales + r * p.params_per_row, hd, spec.group_size(), rows + static_cast<size_t>(r) * hd);
    }
  }
}

void EncodeKvSegment(const KvSpec& spec, uint8_t* block, int layer, int kind, int head, const float* rows) {
  const KvDtype d = spec.dtype(layer, head);
  const int hd = spec.head_dim();
  const SegmentPtrs p = Segment(spec, layer, kind, head);
  auto* scales = reinterpret_cast<uint16_t*>(block + p.scales_offset);
  if (kind == 0 && KeysPerChannel(d)) {
    EncodeKvKeysPerChannel(rows, spec.block_size(), hd, spec.group_size(), block + p.data_offset, scales);
    return;
  }
  for (int r = 0; r < spec.block_size(); ++r) {
    EncodeKvRow(d, rows + static_cast<size_t>(r) * hd, hd, spec.group_size(), block + p.data_offset + r * p.row_bytes,
                scales + r * p.params_per_row);
  }
}

void ConvertKvBlock(const KvSpec& src_spec, const uint8_t* src, const KvSpec& dst_spec, uint8_t* dst) {
  CHECK(src_spec.num_layers() == dst_spec.num_layers() && src_spec.num_kv_heads() == dst_spec.num_kv_heads() &&
        src_spec.head_dim() == dst_spec.head_dim() && src_spec.block_size() == dst_spec.block_size())
      << "ConvertKvBlock: " << src_spec.Describe() << " -> " << dst_spec.Describe();
  std::vector<float> rows(static_cast<size_t>(src_spec.block_size()) * src_spec.head_dim());
  for (int l = 0; l < src_spec.num_layers(); ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < src_spec.num_kv_heads(); ++h) {
        DecodeKvSegment(src_spec, src, l, kind, h, rows.data());
        EncodeKvSegment(dst_spec, dst, l, kind, h, rows.data());
      }
    }
  }
}

}  // namespace kvserve
