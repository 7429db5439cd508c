// GGUF weights read as stored on the device (cuda_kernels.h): the matrix-vector kernel of decode
// steps and small batches, which decodes blocks in registers; the dequantizer that gives larger
// batches a dense copy for the tensor-core GEMM; the embedding lookup of a quantized table. The
// block decoders are ggml_dequant.h, shared with the host test that holds them to the CPU
// reference bit for bit; tests/gpu/cuda_quant_test.cpp compares these kernels with the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/cuda_device_common.cuh"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/ggml_dequant.h"

namespace kvserve::cuda {
namespace {

constexpr int kMatVecWarps = 4;  // rows per CTA, one warp each
constexpr int kDequantThreads = 256;
constexpr int kEmbedThreads = 128;

// Eight consecutive activations from 16-byte aligned memory (8 F16/BF16 values, or 2 x 4 F32).
__device__ __forceinline__ void Load8(const float* p, float out[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
__device__ __forceinline__ void Load8(const __half* p, float out[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[k] & 0xFFFF)));
    out[2 * k + 1] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[k] >> 16)));
  }
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float out[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __uint_as_float(w[k] << 16);
    out[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
  }
}

// One warp per row: lane i decodes groups i, i + 32, ... of the row to integer form once and
// multiplies each with the same eight activations of every token of the pass, factored as
// llama.cpp's kernels do: scale * sum(q x) (+ offset * sum(x)), so a value costs one FMA per
// token and the decoding is shared by the tokens. The warp then sums its lanes per token.
template <GgmlType T, typename X>
__global__ void __launch_bounds__(32 * kMatVecWarps)
    QuantMatVecKernel(const uint8_t* __restrict__ w, int64_t row_bytes, int rows, int groups,
                      const X* __restrict__ x, int64_t ldx, int nt, float* __restrict__ y, int64_t ldy,
                      bool accumulate) {
  constexpr bool kOffset = GgmlBlock<T>::kOffset;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kMatVecWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp: `row` is the same on its lanes
  const uint8_t* wr = w + static_cast<int64_t>(row) * row_bytes;
  float acc[kMatVecTokens];
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) acc[t] = 0.0f;
  for (int g = lane; g < groups; g += 32) {
    const Group8 q = IntGroup8<T>(wr, g);
    float qf[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) qf[k] = static_cast<float>(q.q[k]);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < nt) {
        float a[8];
        Load8(x + t * ldx + 8 * static_cast<int64_t>(g), a);
        float dot = 0.0f, sum = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          dot = fmaf(qf[k], a[k], dot);
          if (kOffset) sum += a[k];
        }
        acc[t] = fmaf(q.scale, dot, acc[t]);
        if (kOffset) acc[t] = fmaf(q.offset, sum, acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) {
    if (t < nt) {  // nt is the same on every lane: the shuffles see the whole warp
      const float s = WarpSum(acc[t]);
      if (lane == 0) {
        float* out = y + t * ldy + row;
        *out = accumulate ? *out + s : s;
      }
    }
  }
}

// Grid-stride over the matrix's groups of eight values; group i is values [8 i, 8 i + 8) of the
// dense [rows][cols] output.
template <GgmlType T, typename O>
__global__ void __launch_bounds__(kDequantThreads)
    DequantizeKernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t groups_per_row, int64_t total,
                     O* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups_per_row;
    float v[8];
    DecodeGroup8<T>(w + r * row_bytes, i - r * groups_per_row, v);
    O* o = out + 8 * i;
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = FromFloat<O>(v[k]);
  }
}

// One CTA per token.
template <GgmlType T>
__global__ void __launch_bounds__(kEmbedThreads)
    QuantEmbeddingKernel(const uint8_t* __restrict__ table, int64_t row_bytes, const int32_t* __restrict__ tokens,
                         int groups, int dim, float* __restrict__ x) {
  const int t = blockIdx.x;
  const uint8_t* row = table + static_cast<int64_t>(tokens[t]) * row_bytes;
  float* out = x + static_cast<int64_t>(t) * dim;
  for (int g = threadIdx.x; g < groups; g += blockDim.x) DecodeGroup8<T>(row, g, out + 8 * g);
}

// Calls f(pointer of the element type) for an activation type.
template <typename F>
void VisitAct(ActType t, F&& f) {
  switch (t) {
    case ActType::kF32: f(static_cast<float*>(nullptr)); return;
    case ActType::kF16: f(static_cast<__half*>(nullptr)); return;
    case ActType::kBF16: f(static_cast<__nv_bfloat16*>(nullptr)); return;
  }
}

// Bytes of a row of `cols` values of B's type; 0 when cols is not a whole number of blocks.
template <typename B>
int64_t RowBytes(int64_t cols) {
  return cols > 0 && cols % B::kValues == 0 ? cols / B::kValues * B::kBytes : 0;
}

}  // namespace

bool ReadsAsStored(GgmlType type) {
  return VisitQuantType(type, [](auto) {});
}

cudaError_t LaunchQuantMatVec(const QuantMatVecArgs& a, cudaStream_t stream) {
  if (a.num_tokens <= 0 || a.rows <= 0) return cudaSuccess;
  // Load8 reads eight activations at once: rows of x must start 16-byte aligned.
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0 || (a.ldx * static_cast<int64_t>(ActBytes(a.x_type))) % 16 != 0) {
    return cudaErrorMisalignedAddress;
  }
  cudaError_t status = cudaErrorInvalidValue;
  VisitQuantType(a.type, [&](auto tag) {
    constexpr GgmlType kType = decltype(tag)::kType;
    const int64_t row_bytes = RowBytes<GgmlBlock<kType>>(a.cols);
    if (row_bytes == 0) return;
    VisitAct(a.x_type, [&](auto* x_tag) {
      using X = std::remove_pointer_t<decltype(x_tag)>;
      const X* x = static_cast<const X*>(a.x);
      const int blocks = (a.rows + kMatVecWarps - 1) / kMatVecWarps;
      for (int t0 = 0; t0 < a.num_tokens; t0 += kMatVecTokens) {
        QuantMatVecKernel<kType, X><<<blocks, 32 * kMatVecWarps, 0, stream>>>(
            static_cast<const uint8_t*>(a.w), row_bytes, a.rows, a.cols / 8, x + t0 * a.ldx, a.ldx,
            std::min(kMatVecTokens, a.num_tokens - t0), a.y + t0 * a.ldy, a.ldy, a.accumulate);
      }
    });
    status = cudaGetLastError();
  });
  return status;
}

cudaError_t LaunchDequantize(GgmlType type, const void* w, int rows, int cols, void* out, ActType out_type,
                             cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  cudaError_t status = cudaErrorInvalidValue;
  VisitQuantType(type, [&](auto tag) {
    constexpr GgmlType kType = decltype(tag)::kType;
    const int64_t row_bytes = RowBytes<GgmlBlock<kType>>(cols);
    if (row_bytes == 0) return;
    const int64_t total = static_cast<int64_t>(rows) * (cols / 8);
    const int blocks = static_cast<int>(std::min<int64_t>((total + kDequantThreads - 1) / kDequantThreads, 1 << 20));
    VisitAct(out_type, [&](auto* o_tag) {
      using O = std::remove_pointer_t<decltype(o_tag)>;
      DequantizeKernel<kType, O><<<blocks, kDequantThreads, 0, stream>>>(static_cast<const uint8_t*>(w), row_bytes,
                                                                          cols / 8, total, static_cast<O*>(out));
    });
    status = cudaGetLastError();
  });
  return status;
}

cudaError_t LaunchQuantEmbedding(GgmlType type, const void* table, const int32_t* tokens, int num_tokens, int dim,
                                 float* x, cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  cudaError_t status = cudaErrorInvalidValue;
  VisitQuantType(type, [&](auto tag) {
    constexpr GgmlType kType = decltype(tag)::kType;
    const int64_t row_bytes = RowBytes<GgmlBlock<kType>>(dim);
    if (row_bytes == 0) return;
    QuantEmbeddingKernel<kType><<<num_tokens, kEmbedThreads, 0, stream>>>(static_cast<const uint8_t*>(table),
                                                                          row_bytes, tokens, dim / 8, dim, x);
    status = cudaGetLastError();
  });
  return status;
}

}  // namespace kvserve::cuda
