// Paged attention over the (possibly quantized) KV arena, flash style.
//
// One CTA per (work item, kv head). A work item is `q_count` consecutive query tokens of one
// sequence (prefill: a tile of the prompt chunk; decode: the sequence's one token) and one
// split of the key range. The CTA serves all n_rep query heads of its kv head, so each K/V tile
// is read from global memory once for the whole GQA group: rows = q_count * n_rep.
//
// Per tile of 32 keys: every thread decodes (dequantizes) a share of the K and V tile into
// shared memory (F32, rows padded to head_dim + 1 floats so column reads are conflict-free),
// then scores[row][key] = q . k with the causal mask key <= position(row), then one warp per row
// updates the running max / sum (online softmax) and rescales, then acc[row][d] += p * v.
// Decode steps split long contexts over several CTAs (partition = keys per split) whose
// unnormalised partials are merged by AttentionCombineKernel.
//
// Shared memory (floats): q [rows][hd], acc [rows][hd], k/v tiles [2][32][hd + 1],
// p [rows][32], max/sum/alpha [3][rows], positions [rows] (int).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include <cstdint>

#include "engine/backend/cuda/cuda_device_common.cuh"
#include "engine/backend/cuda/cuda_kernels.h"

namespace kvserve::cuda {
namespace {

constexpr int kTile = kAttnTile;
static_assert(kTile == 32, "the softmax pass maps one key per lane");

// Decodes keys [tile, tile + n) of one (layer, kind, kv head) segment into dst[j][0..hd).
__device__ __forceinline__ void LoadKvTile(float* dst, const AttnArgs& a, const int32_t* table, int tile, int n,
                                           int dtype, uint64_t seg_offset, int row_bytes) {
  const int hd = a.kv.head_dim;
  const int hdp = hd + 1;
  const int bs = a.kv.block_size;
  const int group_size = a.kv.group_size;
  const int64_t scales_offset = static_cast<int64_t>(bs) * row_bytes;
  const int scale_bytes = (hd / group_size) * 4;  // {scale, bias} f16 per group
  if (a.kv.vec8) {
    const int chunks_per_row = hd / 8;
    const int total = n * chunks_per_row;
    for (int c = threadIdx.x; c < total; c += blockDim.x) {
      const int j = c / chunks_per_row;
      const int chunk = c - j * chunks_per_row;
      const int pos = tile + j;
      const int block = table[pos / bs];
      const int offset = pos - (pos / bs) * bs;
      const uint8_t* seg = a.kv.arena + static_cast<uint64_t>(block) * a.kv.block_bytes + seg_offset;
      float v[8];
      int ea, eb;
      DecodeKvChunk8(dtype, seg + static_cast<int64_t>(offset) * row_bytes,
                     seg + scales_offset + static_cast<int64_t>(offset) * scale_bytes, chunk, group_size, v, &ea, &eb);
      float* row = dst + j * hdp;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        row[ea + k] = v[k];
        row[eb + k] = v[4 + k];
      }
    }
  } else {
    const int total = n * hd;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
      const int j = e / hd;
      const int d = e - j * hd;
      const int pos = tile + j;
      const int block = table[pos / bs];
      const int offset = pos - (pos / bs) * bs;
      const uint8_t* seg = a.kv.arena + static_cast<uint64_t>(block) * a.kv.block_bytes + seg_offset;
      dst[j * hdp + d] = DecodeKvElement(dtype, seg + static_cast<int64_t>(offset) * row_bytes,
                                         seg + scales_offset + static_cast<int64_t>(offset) * scale_bytes, d,
                                         group_size);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256) PagedAttentionKernel(AttnArgs a) {
  extern __shared__ float smem[];
  const AttnWork w = a.work[blockIdx.x];
  const int g = blockIdx.y;
  const int hd = a.kv.head_dim;
  const int hdp = hd + 1;
  const int kvh = a.kv.num_kv_heads;
  const int n_rep = a.num_heads / kvh;
  const int rows = w.q_count * n_rep;
  const int R = a.max_rows;
  float* q_s = smem;
  float* acc_s = q_s + R * hd;
  float* k_s = acc_s + R * hd;
  float* v_s = k_s + kTile * hdp;
  float* p_s = v_s + kTile * hdp;
  float* m_s = p_s + R * kTile;
  float* l_s = m_s + R;
  float* alpha_s = l_s + R;
  int* pos_s = reinterpret_cast<int*>(alpha_s + R);
  const int tid = threadIdx.x;
  const int nth = blockDim.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int nwarps = nth >> 5;

  // Row r = (token r / n_rep of the item, query head g * n_rep + r % n_rep).
  for (int idx = tid; idx < rows * hd; idx += nth) {
    const int r = idx / hd;
    const int d = idx - r * hd;
    const int t = w.q_begin + r / n_rep;
    const int h = g * n_rep + r % n_rep;
    q_s[idx] = a.q[static_cast<int64_t>(t) * a.q_stride + static_cast<int64_t>(h) * hd + d];
    acc_s[idx] = 0.0f;
  }
  for (int r = tid; r < rows; r += nth) {
    pos_s[r] = a.positions[w.q_begin + r / n_rep];
    m_s[r] = -INFINITY;
    l_s[r] = 0.0f;
  }
  int max_pos = -1;
  for (int i = 0; i < w.q_count; ++i) max_pos = max(max_pos, a.positions[w.q_begin + i]);
  int k_end = min(max_pos + 1, a.seq_lens[w.seq]);
  int k_begin = 0;
  if (a.num_splits > 1) {
    k_begin = w.split * a.partition;
    k_end = min(k_end, k_begin + a.partition);
  }
  __syncthreads();

  const int32_t* table = a.block_tables + static_cast<int64_t>(w.seq) * a.max_blocks;
  const int dtype = a.kv.dtypes[g];
  const uint64_t k_seg = a.kv.seg_offsets[g];
  const uint64_t v_seg = a.kv.seg_offsets[kvh + g];
  const int row_bytes = KvRowBytes(dtype, hd);

  for (int tile = k_begin; tile < k_end; tile += kTile) {
    const int n = min(kTile, k_end - tile);
    LoadKvTile(k_s, a, table, tile, n, dtype, k_seg, row_bytes);
    LoadKvTile(v_s, a, table, tile, n, dtype, v_seg, row_bytes);
    __syncthreads();
    // Scores, masked to -inf beyond the tile or the row's position.
    for (int task = tid; task < rows * kTile; task += nth) {
      const int r = task / kTile;
      const int j = task - r * kTile;
      float s = -INFINITY;
      if (j < n && tile + j <= pos_s[r]) {
        const float* qr = q_s + r * hd;
        const float* kr = k_s + j * hdp;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        s = dot;
      }
      p_s[task] = s;
    }
    __syncthreads();
    // Online softmax: one warp per row, one key per lane.
    for (int r = warp; r < rows; r += nwarps) {
      const float s = p_s[r * kTile + lane];
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, WarpMax(s));
      const float e = s == -INFINITY ? 0.0f : expf(s - m_new);
      const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
      const float sum = WarpSum(e);
      p_s[r * kTile + lane] = e;
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + sum;
        alpha_s[r] = alpha;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < rows * hd; idx += nth) {
      const int r = idx / hd;
      const int d = idx - r * hd;
      const float* pr = p_s + r * kTile;
      float acc = acc_s[idx] * alpha_s[r];
      for (int j = 0; j < n; ++j) acc += pr[j] * v_s[j * hdp + d];
      acc_s[idx] = acc;
    }
    __syncthreads();
  }

  for (int idx = tid; idx < rows * hd; idx += nth) {
    const int r = idx / hd;
    const int d = idx - r * hd;
    const int t = w.q_begin + r / n_rep;
    const int h = g * n_rep + r % n_rep;
    if (a.num_splits == 1) {
      const float l = l_s[r];
      const float o = l > 0.0f ? acc_s[idx] / l : 0.0f;
      static_cast<T*>(a.out)[(static_cast<int64_t>(t) * a.num_heads + h) * hd + d] = FromFloat<T>(o);
    } else {
      const int64_t part = (static_cast<int64_t>(t) * a.num_heads + h) * a.num_splits + w.split;
      a.part_acc[part * hd + d] = acc_s[idx];
      if (d == 0) {
        a.part_ml[part * 2] = m_s[r];
        a.part_ml[part * 2 + 1] = l_s[r];
      }
    }
  }
}

template <typename T>
__global__ void AttentionCombineKernel(const float* part_acc, const float* part_ml, int num_heads, int head_dim,
                                       int num_splits, T* out) {
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * num_heads + h) * num_splits;
  float m_max = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m_max = fmaxf(m_max, part_ml[(base + s) * 2]);
  float den = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float m = part_ml[(base + s) * 2];
    if (m != -INFINITY) den += expf(m - m_max) * part_ml[(base + s) * 2 + 1];
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float m = part_ml[(base + s) * 2];
      if (m != -INFINITY) num += expf(m - m_max) * part_acc[(base + s) * head_dim + d];
    }
    out[(static_cast<int64_t>(t) * num_heads + h) * head_dim + d] = FromFloat<T>(den > 0.0f ? num / den : 0.0f);
  }
}

}  // namespace

size_t AttentionSmemBytes(int rows, int head_dim) {
  const size_t floats = 2 * static_cast<size_t>(rows) * head_dim + 2 * static_cast<size_t>(kTile) * (head_dim + 1) +
                        static_cast<size_t>(rows) * kTile + 4 * static_cast<size_t>(rows);
  return floats * sizeof(float);
}

cudaError_t SetAttentionSmemLimit(size_t bytes) {
  // The attribute belongs to the kernel on the current device and is shared by every backend
  // there: it only grows, so a backend that needs less never lowers what another one needs.
  int device = 0;
  cudaError_t got = cudaGetDevice(&device);
  if (got != cudaSuccess) return got;
  static std::mutex mu;
  static std::map<int, size_t> raised;  // by device
  std::lock_guard<std::mutex> lock(mu);
  size_t& current = raised[device];
  if (bytes <= current) return cudaSuccess;
  const int b = static_cast<int>(bytes);
  cudaError_t e = cudaFuncSetAttribute(PagedAttentionKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, b);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(PagedAttentionKernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, b);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(PagedAttentionKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, b);
  if (e == cudaSuccess) current = bytes;
  return e;
}

cudaError_t LaunchAttention(const AttnArgs& args, cudaStream_t stream) {
  if (args.num_work <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(args.num_work), static_cast<unsigned>(args.kv.num_kv_heads));
  const size_t smem = AttentionSmemBytes(args.max_rows, args.kv.head_dim);
  // The output type only matters for the single-split store; partials are always F32.
  switch (args.out_type) {
    case ActType::kF32: PagedAttentionKernel<float><<<grid, args.threads, smem, stream>>>(args); break;
    case ActType::kF16: PagedAttentionKernel<__half><<<grid, args.threads, smem, stream>>>(args); break;
    case ActType::kBF16: PagedAttentionKernel<__nv_bfloat16><<<grid, args.threads, smem, stream>>>(args); break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAttentionCombine(const float* part_acc, const float* part_ml, int num_tokens, int num_heads,
                                   int head_dim, int num_splits, void* out, ActType out_type, cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(num_heads));
  const int threads = head_dim >= 128 ? 128 : (head_dim >= 64 ? 64 : 32);
  switch (out_type) {
    case ActType::kF32:
      AttentionCombineKernel<<<grid, threads, 0, stream>>>(part_acc, part_ml, num_heads, head_dim, num_splits,
                                                           static_cast<float*>(out));
      break;
    case ActType::kF16:
      AttentionCombineKernel<<<grid, threads, 0, stream>>>(part_acc, part_ml, num_heads, head_dim, num_splits,
                                                           static_cast<__half*>(out));
      break;
    case ActType::kBF16:
      AttentionCombineKernel<<<grid, threads, 0, stream>>>(part_acc, part_ml, num_heads, head_dim, num_splits,
                                                           static_cast<__nv_bfloat16*>(out));
      break;
  }
  return cudaGetLastError();
}

}  // namespace kvserve::cuda
