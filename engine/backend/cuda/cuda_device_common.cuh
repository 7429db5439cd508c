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

// A quantized row's params are {scale, bias} f16 pairs per group (cache/kv_codec.h); they may
// sit at any even or odd byte offset (INT4 rows of odd byte length): read bytes.
__device__ __forceinline__ float LoadHalfBytes(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<uint16_t>(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ float LoadScale(const uint8_t* params, int group) {
  return LoadHalfBytes(params + 4 * group);
}
__device__ __forceinline__ float LoadBias(const uint8_t* params, int group) {
  return LoadHalfBytes(params + 4 * group + 2);
}
// fma(q, scale, bias), as DecodeKvRow.
__device__ __forceinline__ float Dequantize(int q, float scale, float bias) {
  return __fmaf_rn(static_cast<float>(q), scale, bias);
}

// Element d of a row (DecodeKvRow, one value).
__device__ __forceinline__ float DecodeKvElement(int dtype, const uint8_t* data, const uint8_t* scales, int d,
                                                 int group_size) {
  switch (dtype) {
    case kKvF32: return reinterpret_cast<const float*>(data)[d];
    case kKvF16: return __half2float(reinterpret_cast<const __half*>(data)[d]);
    case kKvBF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(data)[d]);
    case kKvInt8: {
      const int g = d / group_size;
      return Dequantize(static_cast<int8_t>(data[d]), LoadScale(scales, g), LoadBias(scales, g));
    }
    default: {
      const int g = d / group_size;
      const int i = d - g * group_size;
      const int half = group_size / 2;
      const uint8_t byte = data[g * half + (i < half ? i : i - half)];
      const int q = (i < half ? (byte & 0xF) : (byte >> 4)) - 8;
      return Dequantize(q, LoadScale(scales, g), LoadBias(scales, g));
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
      const int g = (8 * c) / group_size;
      const float s = LoadScale(scales, g), z = LoadBias(scales, g);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[k] = Dequantize(static_cast<int8_t>((u.x >> (8 * k)) & 0xFF), s, z);
        v[4 + k] = Dequantize(static_cast<int8_t>((u.y >> (8 * k)) & 0xFF), s, z);
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
      const float s = LoadScale(scales, g), z = LoadBias(scales, g);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int byte = (u >> (8 * k)) & 0xFF;
        v[k] = Dequantize((byte & 0xF) - 8, s, z);
        v[4 + k] = Dequantize((byte >> 4) - 8, s, z);
      }
      *a = g * group_size + i, *b = g * group_size + i + half;
      return;
    }
  }
}

// round((x - bias) * inv_scale) clamped to [lo, hi], as GroupCode::Quantize in kv_codec.cpp.
__device__ __forceinline__ int QuantizeKvValue(float x, float bias, float inv_scale, int lo, int hi) {
  const int q = __float2int_rn(__fmul_rn(__fsub_rn(x, bias), inv_scale));  // half to even, as std::nearbyint
  return q < lo ? lo : (q > hi ? hi : q);
}

__device__ __forceinline__ void StoreHalfBytes(uint8_t* p, float x) {
  const uint16_t bits = __half_as_ushort(__float2half_rn(x));
  p[0] = static_cast<uint8_t>(bits & 0xFF);
  p[1] = static_cast<uint8_t>(bits >> 8);
}

// Encodes row x[0..head_dim) (shared memory, written before the call and __syncwarp'ed) into
// `data`/`scales` exactly as EncodeKvRow. Called by all 32 lanes of one warp; `params` is
// scratch of [2 * head_dim / group_size] floats private to the warp (inverse scales, biases).
__device__ inline void EncodeKvRowWarp(int dtype, const float* x, int head_dim, int group_size, uint8_t* data,
                                       uint8_t* scales, float* params, int lane) {
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
      const int q_lo = int8 ? -128 : -8;
      const int q_hi = int8 ? 127 : 7;
      const int groups = head_dim / group_size;
      float* inv_scale = params;
      float* bias = params + groups;
      for (int g = lane; g < groups; g += 32) {
        float lo = x[g * group_size], hi = lo;
        for (int i = 1; i < group_size; ++i) {
          lo = fminf(lo, x[g * group_size + i]);
          hi = fmaxf(hi, x[g * group_size + i]);
        }
        StoreHalfBytes(scales + 4 * g, __fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(q_hi - q_lo)));
        const float scale = LoadScale(scales, g);
        StoreHalfBytes(scales + 4 * g + 2, __fadd_rn(lo, __fmul_rn(static_cast<float>(-q_lo), scale)));
        bias[g] = LoadBias(scales, g);
        inv_scale[g] = scale != 0.0f ? __fdiv_rn(1.0f, scale) : 0.0f;
      }
      __syncwarp();
      if (int8) {
        for (int d = lane; d < head_dim; d += 32) {
          const int g = d / group_size;
          data[d] = static_cast<uint8_t>(static_cast<int8_t>(QuantizeKvValue(x[d], bias[g], inv_scale[g], q_lo, q_hi)));
        }
      } else {
        const int half = group_size / 2;
        for (int byte = lane; byte < head_dim / 2; byte += 32) {
          const int g = byte / half;
          const int i = byte - g * half;
          const int lo = QuantizeKvValue(x[g * group_size + i], bias[g], inv_scale[g], q_lo, q_hi) + 8;
          const int hi = QuantizeKvValue(x[g * group_size + i + half], bias[g], inv_scale[g], q_lo, q_hi) + 8;
          data[byte] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
  }
}

}  // namespace kvserve::cuda
