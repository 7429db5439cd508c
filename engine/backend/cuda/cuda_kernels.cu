// Row and elementwise kernels of the CUDA backend: embedding gather, RMSNorm, RoPE, bias,
// SwiGLU, the fused KV append+quantize, ShiftKeys, random weights and a copy kernel. See
// cuda_kernels.h for the contracts; tests/gpu compares each with its CPU reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "engine/backend/cuda/cuda_device_common.cuh"
#include "engine/backend/cuda/cuda_kernels.h"

namespace kvserve::cuda {
namespace {

constexpr int kRowThreads = 256;

// Grid for a grid-stride loop over n elements.
int StrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65536)));
}

// ---- Embedding ----

template <typename T>
__global__ void EmbeddingKernel(const T* table, const int32_t* tokens, int dim, float* x) {
  const int t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(tokens[t]) * dim;
  float* out = x + static_cast<int64_t>(t) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] = ToFloat(row[i]);
}

// ---- RMSNorm ----

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(const float* x, const int32_t* rows, int dim, const float* weight, float eps, T* out) {
  __shared__ double partial[kRowThreads / 32];
  __shared__ float scale_s;
  const int r = blockIdx.x;
  const int src = rows != nullptr ? rows[r] : r;
  const float* xr = x + static_cast<int64_t>(src) * dim;
  double sum = 0.0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum += static_cast<double>(xr[i]) * xr[i];
  sum = WarpSumDouble(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += partial[w];
    scale_s = static_cast<float>(1.0 / sqrt(total / dim + static_cast<double>(eps)));
  }
  __syncthreads();
  const float scale = scale_s;
  T* o = out + static_cast<int64_t>(r) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = FromFloat<T>(__fmul_rn(__fmul_rn(xr[i], scale), weight[i]));
}

// ---- RoPE ----

__global__ void RopeKernel(RopeArgs a) {
  const int t = blockIdx.x;
  float* row = a.qkv + static_cast<int64_t>(t) * a.stride;
  const int pos = a.positions[t];
  const int half = a.rope_dim / 2;
  const int heads = a.num_heads + a.num_kv_heads;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx - h * half;
    float c, s;
    if (pos < a.table_positions) {
      c = a.cos_sin[(static_cast<int64_t>(pos) * half + i) * 2];
      s = a.cos_sin[(static_cast<int64_t>(pos) * half + i) * 2 + 1];
    } else {
      const double theta = pos * a.freq_scale * a.inv_freq[i];
      c = static_cast<float>(cos(theta));
      s = static_cast<float>(sin(theta));
    }
    float* head = row + static_cast<int64_t>(h) * a.head_dim;
    const int i0 = a.neox ? i : 2 * i;
    const int i1 = a.neox ? i + half : 2 * i + 1;
    const float x0 = head[i0];
    const float x1 = head[i1];
    // Explicit rounding: no FMA contraction, so the result equals the CPU backend's.
    float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    float y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    if (h < a.num_heads) {
      y0 = __fmul_rn(y0, a.q_scale);
      y1 = __fmul_rn(y1, a.q_scale);
    }
    head[i0] = y0;
    head[i1] = y1;
  }
  const int rest = a.head_dim - a.rope_dim;  // dims of q outside the rotation still get the scale
  for (int idx = threadIdx.x; rest > 0 && idx < a.num_heads * rest; idx += blockDim.x) {
    const int h = idx / rest;
    float& v = row[static_cast<int64_t>(h) * a.head_dim + a.rope_dim + (idx - h * rest)];
    v = __fmul_rn(v, a.q_scale);
  }
}

// ---- Bias, SwiGLU ----

__global__ void AddBiasKernel(float* x, int64_t stride, int rows, int cols, const float* bias) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const int c = static_cast<int>(i - r * cols);
    x[r * stride + c] += bias[c];
  }
}

template <typename T>
__global__ void SwiGluKernel(const float* gate_up, int num_tokens, int ffn, T* out) {
  const int64_t n = static_cast<int64_t>(num_tokens) * ffn;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / ffn;
    const int64_t c = i - t * ffn;
    const float g = gate_up[t * 2 * ffn + c];
    const float u = gate_up[t * 2 * ffn + ffn + c];
    out[i] = FromFloat<T>(g / (1.0f + expf(-g)) * u);
  }
}

// ---- KV append + quantize: one warp per (token, K|V, kv head) row ----

constexpr int kKvWarps = 4;

__global__ void __launch_bounds__(kKvWarps * 32)
    StoreKvKernel(KvLayerView kv, const float* k, const float* v, int64_t stride, int num_tokens,
                  const int64_t* slots) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int per_token = 2 * kv.num_kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kKvWarps + warp;
  if (item >= static_cast<int64_t>(num_tokens) * per_token) return;  // warp-uniform; no block barriers below
  const int t = static_cast<int>(item / per_token);
  const int rem = static_cast<int>(item - static_cast<int64_t>(t) * per_token);
  const int kind = rem / kv.num_kv_heads;
  const int h = rem - kind * kv.num_kv_heads;
  const int64_t slot = slots[t];
  if (slot < 0) return;  // padding row
  const int hd = kv.head_dim;
  const int groups = hd / kv.group_size;
  float* row = smem + warp * (hd + 2 * groups);
  float* params = row + hd;
  const float* src = (kind == 0 ? k : v) + static_cast<int64_t>(t) * stride + static_cast<int64_t>(h) * hd;
  for (int d = lane; d < hd; d += 32) row[d] = src[d];
  __syncwarp();
  const int dtype = kv.dtypes[h];
  const int64_t row_bytes = KvRowBytes(dtype, hd);
  const int64_t block = slot / kv.block_size;
  const int64_t offset = slot - block * kv.block_size;
  uint8_t* seg = kv.arena + static_cast<uint64_t>(block) * kv.block_bytes + kv.seg_offsets[kind * kv.num_kv_heads + h];
  uint8_t* data = seg + offset * row_bytes;
  uint8_t* scales = seg + static_cast<int64_t>(kv.block_size) * row_bytes + offset * groups * 4;
  EncodeKvRowWarp(dtype, row, hd, kv.group_size, data, scales, params, lane);
}

// ---- ShiftKeys: one warp per (block, layer, kv head, row) ----

__global__ void __launch_bounds__(kKvWarps * 32) ShiftKeysKernel(ShiftKeysArgs a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t total = static_cast<int64_t>(a.num_blocks) * a.num_layers * a.num_kv_heads * a.block_size;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kKvWarps + warp;
  if (item >= total) return;
  int64_t rest = item;
  const int r = static_cast<int>(rest % a.block_size);
  rest /= a.block_size;
  const int h = static_cast<int>(rest % a.num_kv_heads);
  rest /= a.num_kv_heads;
  const int l = static_cast<int>(rest % a.num_layers);
  const int bi = static_cast<int>(rest / a.num_layers);
  const int hd = a.head_dim;
  const int groups = hd / a.group_size;
  float* row = smem + warp * (hd + 2 * groups);
  float* params = row + hd;
  const int dtype = a.dtypes[l * a.num_kv_heads + h];
  const int64_t row_bytes = KvRowBytes(dtype, hd);
  uint8_t* seg = a.arena + static_cast<uint64_t>(a.blocks[bi]) * a.block_bytes +
                 a.seg_offsets[(static_cast<int64_t>(l) * 2) * a.num_kv_heads + h];
  uint8_t* data = seg + r * row_bytes;
  uint8_t* scales = seg + static_cast<int64_t>(a.block_size) * row_bytes + static_cast<int64_t>(r) * groups * 4;
  for (int d = lane; d < hd; d += 32) row[d] = DecodeKvElement(dtype, data, scales, d, a.group_size);
  __syncwarp();
  const int half = a.rope_dim / 2;
  for (int i = lane; i < half; i += 32) {
    const int i0 = a.neox ? i : 2 * i;
    const int i1 = a.neox ? i + half : 2 * i + 1;
    const float x0 = row[i0];
    const float x1 = row[i1];
    const float c = a.cos_sin[2 * i];
    const float s = a.cos_sin[2 * i + 1];
    row[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    row[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
  __syncwarp();
  EncodeKvRowWarp(dtype, row, hd, a.group_size, data, scales, params, lane);
}

// ---- Random weights, constants, copy ----

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void FillNormalKernel(T* dst, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t pair = static_cast<uint64_t>(i) / 2;
    const uint64_t ra = SplitMix64(seed ^ (pair * 2 + 0x1234567ull));
    const uint64_t rb = SplitMix64(seed ^ (pair * 2 + 1 + 0x89ABCDEFull));
    const float u1 = (static_cast<float>(ra >> 40) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = static_cast<float>(rb >> 40) * (1.0f / 16777216.0f);           // [0, 1)
    const float r = sqrtf(-2.0f * logf(u1));
    float s, c;
    sincospif(2.0f * u2, &s, &c);
    dst[i] = FromFloat<T>(((i & 1) == 0 ? r * c : r * s) * stddev);
  }
}

__global__ void FillConstantKernel(float* dst, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

__global__ void Copy16Kernel(const uint4* src, uint4* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const void* table, ActType type, const int32_t* tokens, int num_tokens, int dim,
                            float* x, cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  switch (type) {
    case ActType::kF32:
      EmbeddingKernel<<<num_tokens, kRowThreads, 0, stream>>>(static_cast<const float*>(table), tokens, dim, x);
      break;
    case ActType::kF16:
      EmbeddingKernel<<<num_tokens, kRowThreads, 0, stream>>>(static_cast<const __half*>(table), tokens, dim, x);
      break;
    case ActType::kBF16:
      EmbeddingKernel<<<num_tokens, kRowThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), tokens,
                                                              dim, x);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(const float* x, const int32_t* rows, int num_rows, int dim, const float* weight, float eps,
                          void* out, ActType out_type, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  switch (out_type) {
    case ActType::kF32:
      RmsNormKernel<<<num_rows, kRowThreads, 0, stream>>>(x, rows, dim, weight, eps, static_cast<float*>(out));
      break;
    case ActType::kF16:
      RmsNormKernel<<<num_rows, kRowThreads, 0, stream>>>(x, rows, dim, weight, eps, static_cast<__half*>(out));
      break;
    case ActType::kBF16:
      RmsNormKernel<<<num_rows, kRowThreads, 0, stream>>>(x, rows, dim, weight, eps,
                                                          static_cast<__nv_bfloat16*>(out));
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream) {
  if (args.num_tokens <= 0) return cudaSuccess;
  RopeKernel<<<args.num_tokens, 128, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* x, int64_t stride, int rows, int cols, const float* bias, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t n = static_cast<int64_t>(rows) * cols;
  AddBiasKernel<<<StrideBlocks(n, 256), 256, 0, stream>>>(x, stride, rows, cols, bias);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGlu(const float* gate_up, int num_tokens, int ffn, void* out, ActType out_type,
                         cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  const int blocks = StrideBlocks(static_cast<int64_t>(num_tokens) * ffn, 256);
  switch (out_type) {
    case ActType::kF32:
      SwiGluKernel<<<blocks, 256, 0, stream>>>(gate_up, num_tokens, ffn, static_cast<float*>(out));
      break;
    case ActType::kF16:
      SwiGluKernel<<<blocks, 256, 0, stream>>>(gate_up, num_tokens, ffn, static_cast<__half*>(out));
      break;
    case ActType::kBF16:
      SwiGluKernel<<<blocks, 256, 0, stream>>>(gate_up, num_tokens, ffn, static_cast<__nv_bfloat16*>(out));
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchStoreKv(const KvLayerView& kv, const float* k, const float* v, int64_t stride, int num_tokens,
                          const int64_t* slots, cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  const int64_t rows = static_cast<int64_t>(num_tokens) * 2 * kv.num_kv_heads;
  const int blocks = static_cast<int>((rows + kKvWarps - 1) / kKvWarps);
  const size_t smem = sizeof(float) * kKvWarps * (kv.head_dim + 2 * kv.head_dim / kv.group_size);
  StoreKvKernel<<<blocks, kKvWarps * 32, smem, stream>>>(kv, k, v, stride, num_tokens, slots);
  return cudaGetLastError();
}

cudaError_t LaunchShiftKeys(const ShiftKeysArgs& args, cudaStream_t stream) {
  const int64_t rows =
      static_cast<int64_t>(args.num_blocks) * args.num_layers * args.num_kv_heads * args.block_size;
  if (rows <= 0) return cudaSuccess;
  const int64_t blocks = (rows + kKvWarps - 1) / kKvWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * kKvWarps * (args.head_dim + 2 * args.head_dim / args.group_size);
  ShiftKeysKernel<<<static_cast<unsigned>(blocks), kKvWarps * 32, smem, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchFillNormal(void* dst, ActType type, int64_t n, uint64_t seed, float stddev, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int blocks = StrideBlocks(n, 256);
  switch (type) {
    case ActType::kF32:
      FillNormalKernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(dst), n, seed, stddev);
      break;
    case ActType::kF16:
      FillNormalKernel<<<blocks, 256, 0, stream>>>(static_cast<__half*>(dst), n, seed, stddev);
      break;
    case ActType::kBF16:
      FillNormalKernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, seed, stddev);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchFillConstant(float* dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillConstantKernel<<<StrideBlocks(n, 256), 256, 0, stream>>>(dst, n, value);
  return cudaGetLastError();
}

cudaError_t LaunchCopy16(const void* src, void* dst, int64_t n16, cudaStream_t stream) {
  if (n16 <= 0) return cudaSuccess;
  Copy16Kernel<<<StrideBlocks(n16, 256), 256, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst),
                                                           n16);
  return cudaGetLastError();
}

}  // namespace kvserve::cuda
