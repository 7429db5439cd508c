// Host-callable launchers of the CUDA backend's kernels (cuda_kernels.cu, cuda_attention.cu).
//
// Every pointer argument is device memory unless its comment says otherwise; every launcher
// enqueues on `stream`, returns at once, and reports launch errors (cudaGetLastError). Buffers
// carry shape comments. The KV views address the arena exactly as cache/kv_spec.h lays it out,
// and the codecs reproduce cache/kv_codec.h byte for byte (tests/gpu checks both).
// Stateless; callable from any thread with the right device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model/ggml_types.h"

namespace kvserve::cuda {

// Element type of activations fed to GEMMs and of weights on the device.
enum class ActType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline size_t ActBytes(ActType t) { return t == ActType::kF32 ? 4 : 2; }

// KvDtype codes as stored in the device dtype tables (== static_cast<int>(KvDtype)).
enum KvCode : uint8_t { kKvF32 = 0, kKvF16 = 1, kKvBF16 = 2, kKvInt8 = 3, kKvInt4 = 4 };

// ---- Elementwise and row kernels (cuda_kernels.cu) ------------------------------------------

// x[t][0..dim) = float(table[tokens[t]][0..dim)); table: [vocab][dim] of `type`.
cudaError_t LaunchEmbedding(const void* table, ActType type, const int32_t* tokens, int num_tokens,
                            int dim, float* x, cudaStream_t stream);

// out[r][i] = x[src][i] * scale * weight[i], src = rows ? rows[r] : r,
// scale = 1 / sqrt(sum(x[src]^2) / dim + eps) with the sum in double (as the CPU backend).
// x: [*][dim] f32; out: [num_rows][dim] of out_type.
cudaError_t LaunchRmsNorm(const float* x, const int32_t* rows, int num_rows, int dim, const float* weight,
                          float eps, void* out, ActType out_type, cudaStream_t stream);

// In place on qkv rows [num_tokens][stride]: q heads at column 0, k heads at num_heads *
// head_dim. Rotates the first rope_dim dims of each head by positions[t] (pairs (2i, 2i+1), or
// (i, i + rope_dim/2) for NeoX) and multiplies q by q_scale afterwards, in the CPU backend's
// order and rounding. cos/sin come from `cos_sin` below `table_positions`, else from double
// math on inv_freq.
struct RopeArgs {
  float* qkv = nullptr;
  int64_t stride = 0;
  int num_tokens = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int rope_dim = 0;
  bool neox = false;
  const float* cos_sin = nullptr;      // [table_positions][rope_dim / 2][2]
  int table_positions = 0;
  const double* inv_freq = nullptr;    // [rope_dim / 2]
  double freq_scale = 1.0;
  float q_scale = 1.0f;
};
cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);

// x[r][c] += bias[c] for r < rows, c < cols; rows are `stride` floats apart.
cudaError_t LaunchAddBias(float* x, int64_t stride, int rows, int cols, const float* bias, cudaStream_t stream);

// out[t][i] = silu(gate_up[t][i]) * gate_up[t][ffn + i]; gate_up: [num_tokens][2 * ffn] f32,
// out: [num_tokens][ffn] of out_type.
cudaError_t LaunchSwiGlu(const float* gate_up, int num_tokens, int ffn, void* out, ActType out_type,
                         cudaStream_t stream);

// One layer of the KV arena.
struct KvLayerView {
  uint8_t* arena = nullptr;
  uint64_t block_bytes = 0;
  int block_size = 0;
  int head_dim = 0;
  int group_size = 0;
  int num_kv_heads = 0;
  const uint64_t* seg_offsets = nullptr;  // [2][num_kv_heads]: this layer's K then V segments
  const uint8_t* dtypes = nullptr;        // [num_kv_heads] KvCode
  bool vec8 = false;                      // head_dim % 8 == 0 && group_size % 8 == 0 (fast paths)
};

// Writes K and V rows of every token with slots[t] >= 0 at slot slots[t] (block = slot /
// block_size, row = slot % block_size), encoded in each head's dtype exactly as EncodeKvRow.
// k, v: [num_tokens][stride] f32, head h at column h * head_dim.
cudaError_t LaunchStoreKv(const KvLayerView& kv, const float* k, const float* v, int64_t stride, int num_tokens,
                          const int64_t* slots, cudaStream_t stream);

// Re-rotates every K row of `blocks` (all layers and heads) by the rotation (cos_sin) and
// re-encodes it, as CpuBackend::ShiftKeys. seg_offsets: [layers][2][kv_heads]; dtypes:
// [layers][kv_heads]; cos_sin: [rope_dim / 2][2].
struct ShiftKeysArgs {
  uint8_t* arena = nullptr;
  uint64_t block_bytes = 0;
  int block_size = 0;
  int head_dim = 0;
  int group_size = 0;
  int num_layers = 0;
  int num_kv_heads = 0;
  const uint64_t* seg_offsets = nullptr;
  const uint8_t* dtypes = nullptr;
  const int32_t* blocks = nullptr;  // [num_blocks]
  int num_blocks = 0;
  const float* cos_sin = nullptr;
  int rope_dim = 0;
  bool neox = false;
};
cudaError_t LaunchShiftKeys(const ShiftKeysArgs& args, cudaStream_t stream);

// dst[i] = normal(0, stddev) from a counter-based RNG keyed by (seed, i), in `type`.
cudaError_t LaunchFillNormal(void* dst, ActType type, int64_t n, uint64_t seed, float stddev, cudaStream_t stream);
// dst[i] = value.
cudaError_t LaunchFillConstant(float* dst, int64_t n, float value, cudaStream_t stream);
// dst[i] = src[i] over n 16-byte words (bandwidth measurement).
cudaError_t LaunchCopy16(const void* src, void* dst, int64_t n16, cudaStream_t stream);

// ---- Paged attention (cuda_attention.cu) ----------------------------------------------------

// One CTA's share: query tokens [q_begin, q_begin + q_count) of sequence `seq` (consecutive
// rows of the batch), keys of split `split` (positions [split * partition, ...)).
struct AttnWork {
  int32_t seq;
  int32_t q_begin;
  int32_t q_count;
  int32_t split;
};

constexpr int kAttnTile = 32;  // keys per tile (== warp size)

struct AttnArgs {
  KvLayerView kv;
  const float* q = nullptr;        // [num_tokens][q_stride]; head h at column h * head_dim, pre-scaled
  int64_t q_stride = 0;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* seq_lens = nullptr;      // [num_seqs]; 0 = padding (attends to nothing)
  const int32_t* block_tables = nullptr;  // [num_seqs][max_blocks]
  int max_blocks = 0;
  const AttnWork* work = nullptr;         // [num_work]
  int num_work = 0;
  int num_heads = 0;                      // query heads; n_rep = num_heads / kv.num_kv_heads
  int max_rows = 0;                       // q_count * n_rep <= max_rows for every work item
  int partition = 0;                      // keys per split (multiple of kAttnTile) when num_splits > 1
  int num_splits = 1;
  int threads = 128;
  // num_splits == 1: out[t][h * head_dim + d] in out_type ([num_tokens][num_heads * head_dim]).
  void* out = nullptr;
  ActType out_type = ActType::kF32;
  // num_splits > 1: unnormalised partials [t][h][split][head_dim] and (max, sum) [t][h][split][2].
  float* part_acc = nullptr;
  float* part_ml = nullptr;
};

// Dynamic shared memory of one CTA serving `rows` query rows.
size_t AttentionSmemBytes(int rows, int head_dim);
// Raises the kernel's dynamic shared memory limit on the current device to at least `bytes`
// (before the first launch above 48 KiB); never lowers it (other backends on the device).
cudaError_t SetAttentionSmemLimit(size_t bytes);
cudaError_t LaunchAttention(const AttnArgs& args, cudaStream_t stream);
// out[t][h] = combination of the num_splits partials of every token t < num_tokens.
cudaError_t LaunchAttentionCombine(const float* part_acc, const float* part_ml, int num_tokens, int num_heads,
                                   int head_dim, int num_splits, void* out, ActType out_type, cudaStream_t stream);

// ---- GGUF weights read as stored (cuda_quant.cu) ---------------------------------------------
// A quantized matrix is `rows` rows of `cols` values of a GGUF type (its blocks back to back,
// GgmlRowBytes(type, cols) per row), decoded by ggml_dequant.h. cols must be a multiple of the
// type's block size (INVALID_VALUE otherwise, as for a type ReadsAsStored rejects).

// True for the quantized types the kernels below read: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
bool ReadsAsStored(GgmlType type);

// Tokens one pass of the matrix-vector kernel serves: each pass reads the weights once.
constexpr int kMatVecTokens = 8;

// y[t][r] = dot(W[r], x[t]) (+ y[t][r] when accumulate) for t < num_tokens, r < rows, in F32
// with the values decoded in registers; passes of kMatVecTokens tokens. x: [num_tokens][ldx] of
// x_type; y: [num_tokens][ldy] f32.
struct QuantMatVecArgs {
  GgmlType type = GgmlType::kQ8_0;
  const void* w = nullptr;
  int rows = 0;
  int cols = 0;
  const void* x = nullptr;
  ActType x_type = ActType::kF16;
  int64_t ldx = 0;
  int num_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
};
cudaError_t LaunchQuantMatVec(const QuantMatVecArgs& args, cudaStream_t stream);

// out[r][c] = W[r][c] rounded to out_type ([rows][cols], dense): the batched products decode a
// matrix into scratch and run the tensor-core GEMM on it.
cudaError_t LaunchDequantize(GgmlType type, const void* w, int rows, int cols, void* out, ActType out_type,
                             cudaStream_t stream);

// x[t][0..dim) = row tokens[t] of `table` (a quantized [vocab][dim] matrix), decoded to f32.
cudaError_t LaunchQuantEmbedding(GgmlType type, const void* table, const int32_t* tokens, int num_tokens, int dim,
                                 float* x, cudaStream_t stream);

// ---- Host helpers ---------------------------------------------------------------------------

// The CPU backend's RoPE tables: cos_sin[p][i] = (cos, sin)(p * freq_scale * inv_freq[i])
// rounded to float, for inv_freq from ModelConfig::RopeInvFreq.
inline void BuildRopeTables(const std::vector<double>& inv_freq, double freq_scale, int positions,
                            std::vector<float>* cos_sin) {
  const size_t half = inv_freq.size();
  cos_sin->resize(static_cast<size_t>(positions) * half * 2);
  for (int p = 0; p < positions; ++p) {
    for (size_t i = 0; i < half; ++i) {
      const double theta = p * freq_scale * inv_freq[i];
      (*cos_sin)[(static_cast<size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(theta));
      (*cos_sin)[(static_cast<size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(theta));
    }
  }
}

}  // namespace kvserve::cuda
