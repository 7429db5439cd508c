// Device helpers shared by cuda_kernels.cu and cuda_attention.cu: type conversions, warp
// reductions, and the KV row codecs of cache/kv_codec.h (decode one element, decode a chunk of
// eight, encode one row with one warp). Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_kernels.h"

namespace kvserve::cuda {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumDouble(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Bytes of the data part of one row (KvRowDataBytes).
__device__ __forceinline__ int KvRowBytes(int dtype, int head_dim) {
  switch (dtype) {
    case kKvF32: return 4 * head_dim;
    case kKvF16:
    case kKvBF16: return 2 * head_dim;
    case kKvInt8: return head_dim;
    default: return (head_dim + 1) / 2;
  }
}

// Scales may sit at any even or odd byte offset (INT4 rows of odd byte length): read bytes.
__device__ __forceinline__ float LoadScale(const uint8_t* scales, int group) {
  const uint16_t bits = static_cast<uint16_t>(scales[2 * group] | (scales[2 * group + 1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// Element d of a row (DecodeKvRow, one value).
__device__ __forceinline__ float DecodeKvElement(int dtype, const uint8_t* data, const uint8_t* scales, int d,
                                                 int group_size) {
  switch (dtype) {
    case kKvF32: return reinterpret_cast<const float*>(data)[d];
    case kKvF16: return __half2float(reinterpret_cast<const __half*>(data)[d]);
    case kKvBF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(data)[d]);
    case kKvInt8: return static_cast<float>(static_cast<int8_t>(data[d])) * LoadScale(scales, d / group_size);
    default: {
      const int g = d / group_size;
      const int i = d - g * group_size;
      const int half = group_size / 2;
      const uint8_t byte = data[g * half + (i < half ? i : i - half)];
      const int q = (i < half ? (byte & 0xF) : (byte >> 4)) - 8;
      return static_cast<float>(q) * LoadScale(scales, g);
    }
  }
}

// Chunk c of a row holds eight values: v[0..4) are elements a..a+3 and v[4..8) elements
// b..b+3. For F32/F16/BF16/INT8 the chunk is elements [8c, 8c+8); for INT4 it is the four bytes
// [4c, 4c+4), i.e. values i..i+3 and i+G/2..i+G/2+3 of their group. REQUIRES (the "vec8"
// layout): head_dim % 8 == 0 and group_size % 8 == 0, which also makes every load aligned.
__device__ __forceinline__ void DecodeKvChunk8(int dtype, const uint8_t* data, const uint8_t* scales, int c,
                                               int group_size, float v[8], int* a, int* b) {
  switch (dtype) {
    case kKvF32: {
      const float4 x0 = reinterpret_cast<const float4*>(data)[2 * c];
      const float4 x1 = reinterpret_cast<const float4*>(data)[2 * c + 1];
      v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w, v[4] = x1.x, v[5] = x1.y, v[6] = x1.z, v[7] = x1.w;
      *a = 8 * c, *b = 8 * c + 4;
      return;
    }
    case kKvF16: {
      const uint4 u = reinterpret_cast<const uint4*>(data)[c];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[k] & 0xFFFF)));
        v[2 * k + 1] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[k] >> 16)));
      }
      *a = 8 * c, *b = 8 * c + 4;
      return;
    }
    case kKvBF16: {
      const uint4 u = reinterpret_cast<const uint4*>(data)[c];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
      }
      *a = 8 * c, *b = 8 * c + 4;
      return;
    }
    case kKvInt8: {
      const uint2 u = reinterpret_cast<const uint2*>(data)[c];
      const float s = LoadScale(scales, (8 * c) / group_size);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[k] = static_cast<float>(static_cast<int8_t>((u.x >> (8 * k)) & 0xFF)) * s;
        v[4 + k] = static_cast<float>(static_cast<int8_t>((u.y >> (8 * k)) & 0xFF)) * s;
      }
      *a = 8 * c, *b = 8 * c + 4;
      return;
    }
    default: {
      const uint32_t u = reinterpret_cast<const uint32_t*>(data)[c];
      const int half = group_size / 2;
      const int byte0 = 4 * c;
      const int g = byte0 / half;
      const int i = byte0 - g * half;
      const float s = LoadScale(scales, g);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int byte = (u >> (8 * k)) & 0xFF;
        v[k] = static_cast<float>((byte & 0xF) - 8) * s;
        v[4 + k] = static_cast<float>((byte >> 4) - 8) * s;
      }
      *a = g * group_size + i, *b = g * group_size + i + half;
      return;
    }
  }
}

__device__ __forceinline__ int QuantizeKvValue(float x, float inv_scale, int max_q) {
  const int q = __float2int_rn(x * inv_scale);  // round half to even, as std::nearbyint
  return q < -max_q ? -max_q : (q > max_q ? max_q : q);
}

// Encodes row x[0..head_dim) (shared memory, written before the call and __syncwarp'ed) into
// `data`/`scales` exactly as EncodeKvRow. Called by all 32 lanes of one warp; inv_scale is
// scratch of [head_dim / group_size] floats private to the warp.
__device__ inline void EncodeKvRowWarp(int dtype, const float* x, int head_dim, int group_size, uint8_t* data,
                                       uint8_t* scales, float* inv_scale, int lane) {
  switch (dtype) {
    case kKvF32:
      for (int d = lane; d < head_dim; d += 32) reinterpret_cast<float*>(data)[d] = x[d];
      return;
    case kKvF16:
      for (int d = lane; d < head_dim; d += 32) reinterpret_cast<__half*>(data)[d] = __float2half_rn(x[d]);
      return;
    case kKvBF16:
      for (int d = lane; d < head_dim; d += 32) {
        reinterpret_cast<__nv_bfloat16*>(data)[d] = __float2bfloat16_rn(x[d]);
      }
      return;
    default: {
      const bool int8 = dtype == kKvInt8;
      const int max_q = int8 ? 127 : 7;
      const int groups = head_dim / group_size;
      for (int g = lane; g < groups; g += 32) {
        float amax = 0.0f;
        for (int i = 0; i < group_size; ++i) amax = fmaxf(amax, fabsf(x[g * group_size + i]));
        const __half h = __float2half_rn(amax / static_cast<float>(max_q));
        const uint16_t bits = __half_as_ushort(h);
        scales[2 * g] = static_cast<uint8_t>(bits & 0xFF);
        scales[2 * g + 1] = static_cast<uint8_t>(bits >> 8);
        const float scale = __half2float(h);
        inv_scale[g] = scale != 0.0f ? 1.0f / scale : 0.0f;
      }
      __syncwarp();
      if (int8) {
        for (int d = lane; d < head_dim; d += 32) {
          data[d] = static_cast<uint8_t>(static_cast<int8_t>(QuantizeKvValue(x[d], inv_scale[d / group_size], 127)));
        }
      } else {
        const int half = group_size / 2;
        for (int byte = lane; byte < head_dim / 2; byte += 32) {
          const int g = byte / half;
          const int i = byte - g * half;
          const float inv = inv_scale[g];
          const int lo = QuantizeKvValue(x[g * group_size + i], inv, 7) + 8;
          const int hi = QuantizeKvValue(x[g * group_size + i + half], inv, 7) + 8;
          data[byte] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
  }
}

}  // namespace kvserve::cuda
