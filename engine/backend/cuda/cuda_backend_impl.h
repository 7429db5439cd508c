// CudaBackend::Impl: the state behind CudaBackend, shared by cuda_backend.cpp (device, weights,
// KV arena, block operations) and cuda_forward.cpp (batch packing, launch, CUDA graphs).
// Internal to engine/backend/cuda. Engine thread only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cache/kv_spec.h"
#include "common/profiler.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/graph_cache_policy.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/model/ggml_types.h"
#include "engine/model/model_config.h"

namespace kvserve {

// Status from a CUDA runtime / cuBLAS call; `what` names the call site.
Status CudaStatus(cudaError_t e, const char* what);
Status CublasStatus(cublasStatus_t e, const char* what);

#define CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::kvserve::CudaStatus((expr), #expr))
#define CUBLAS_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::kvserve::CublasStatus((expr), #expr))

// One cudaMalloc'ed region handed out in 256-byte aligned pieces (weights, scratch).
class DeviceRegion {
 public:
  DeviceRegion() = default;
  DeviceRegion(const DeviceRegion&) = delete;
  DeviceRegion& operator=(const DeviceRegion&) = delete;
  ~DeviceRegion() { Release(); }
  [[nodiscard]] Status Allocate(size_t bytes, const char* what);
  void Release();
  // REQUIRES: enough room left (CHECKed; sizes are computed before Allocate).
  void* Take(size_t bytes);
  size_t size() const { return size_; }
  static size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

// A weight matrix on the device: `rows` rows of `cols` values of `type`, which is either the
// activation type's float type (F16/BF16/F32: cuBLAS reads it) or a quantized GGUF type kept as
// the file stores it (cuda::ReadsAsStored: the kernels of cuda_quant.cu decode it).
struct DeviceMatrix {
  const void* data = nullptr;
  GgmlType type = GgmlType::kF16;
  int rows = 0;
  int cols = 0;
  size_t row_bytes = 0;
};
// Matrices stacked by rows into one product (QKV, gate/up): the rows of the output are the
// parts' rows in order. Consecutive parts of one type are merged into one matrix, so a model
// of one type has one part per product; a mixed one (Q4_K_M's Q6_K wv) keeps its parts apart.
using StackedMatrix = std::vector<DeviceMatrix>;
inline int StackedRows(const StackedMatrix& m) {
  int rows = 0;
  for (const DeviceMatrix& p : m) rows += p.rows;
  return rows;
}

struct CudaLayerWeights {
  const float* attn_norm = nullptr;  // [dim]
  const float* ffn_norm = nullptr;   // [dim]
  StackedMatrix wqkv;                // [q_dim + 2 kv_dim][dim]: wq; wk; wv
  float* bqkv = nullptr;             // [q_dim + 2 kv_dim] or null
  StackedMatrix wo;                  // [dim][q_dim]
  StackedMatrix w_gate_up;           // [2 ffn][dim]: w_gate; w_up
  StackedMatrix w_down;              // [dim][ffn]
};

// Sizes of one step as run on the device (decode steps padded to their graph bucket) and the
// byte offsets of its arrays inside the packed input buffer.
struct StepPlan {
  int num_tokens = 0;   // rows run (>= the batch's tokens when padded)
  int num_seqs = 0;
  int max_blocks = 0;   // block table stride
  int num_logits = 0;   // logits rows computed
  int real_logits = 0;  // logits rows copied out
  bool decode = false;  // one token per sequence
  bool graph = false;   // replayable: decode with logits for every sequence (padded to a bucket)
  bool graph_replay_allowed = true;  // false: run a graph-shaped step eagerly (profiling)
  int num_work = 0;
  int attn_rows = 0;
  int attn_threads = 0;
  int num_splits = 1;
  int partition = 0;
  // Offsets (bytes) in the input buffer.
  size_t slots = 0, tokens = 0, positions = 0, query_start = 0, seq_lens = 0, logits_rows = 0, tables = 0,
         work = 0, total = 0;
};

struct CudaBackend::Impl {
  ModelConfig config;
  CudaBackendOptions options;
  std::string description;
  int num_sms = 0;
  size_t smem_optin = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cuda::ActType act = cuda::ActType::kF16;
  int max_model_len = 0;
  CudaBackendStats stats;

  // Weights: token_embd [vocab][dim], output [vocab][dim] (may alias token_embd), norms F32.
  DeviceRegion weight_region;
  DeviceMatrix token_embd;
  StackedMatrix output;
  const float* output_norm = nullptr;
  std::vector<CudaLayerWeights> layers;
  int64_t max_quant_values = 0;  // largest quantized part (rows * cols); bounds the dequantize scratch
  std::optional<GgmlType> random_matrix_type;  // RandomWeights: this GGUF type (else the act type)

  // RoPE: cos/sin [table_positions][rope_dim / 2][2] and inv_freq [rope_dim / 2] (double).
  DeviceRegion rope_region;
  float* rope_cos_sin = nullptr;
  double* rope_inv_freq = nullptr;
  int rope_table_positions = 0;
  std::vector<double> inv_freq_host;

  // Scratch sized by the limits (T = max_num_tokens, L = max_logits).
  DeviceRegion scratch_region;
  void* cublas_workspace = nullptr;  // kCublasWorkspaceBytes
  float* x = nullptr;                // [T][dim] residual stream
  void* xn = nullptr;                // [T][dim] normed input (act)
  float* qkv = nullptr;              // [T][q_dim + 2 kv_dim]
  void* attn = nullptr;              // [T][q_dim] (act)
  float* gate_up = nullptr;          // [T][2 ffn]
  void* ffn_h = nullptr;             // [T][ffn] (act)
  void* xl = nullptr;                // [L][dim] normed logits rows (act)
  float* logits = nullptr;           // [L][vocab]
  float* part_acc = nullptr;         // [part_rows][head_dim] split-K partials
  float* part_ml = nullptr;          // [part_rows][2]
  void* dequant = nullptr;           // [dequant_values] (act): rows of a quantized part for the GEMM, or null
  int64_t dequant_values = 0;
  int64_t part_rows = 0;
  int prefill_rows = 0;              // query rows per prefill CTA (q tile * n_rep)

  // KV arena and its device-side layout tables.
  std::unique_ptr<KvSpec> spec;
  uint8_t* arena = nullptr;
  size_t arena_bytes = 0;
  int num_blocks = 0;
  int max_blocks_cap = 0;            // ceil(max_model_len / block_size)
  bool vec8 = false;
  DeviceRegion kv_meta_region;
  uint64_t* seg_offsets = nullptr;   // [layers][2][kv_heads]
  uint8_t* kv_dtypes = nullptr;      // [layers][kv_heads]
  int32_t* shift_blocks = nullptr;   // [num_blocks]
  float* shift_cos_sin = nullptr;    // [rope_dim / 2][2]

  // Inputs: one device buffer, two pinned host staging slots (two steps in flight).
  struct Slot {
    uint8_t* host_inputs = nullptr;  // pinned, input_capacity bytes
    float* host_logits = nullptr;    // pinned, [L][vocab]
    cudaEvent_t done = nullptr;
    bool in_flight = false;
    int num_logits = 0;
    // Profiling (when a profiler is set): events between the step's operations, and the
    // operation each interval belongs to ([i] = from marks[i] to marks[i + 1]).
    std::vector<cudaEvent_t> marks;
    std::vector<ProfileOp> mark_ops;
    Profiler* profiler = nullptr;
  };
  size_t input_capacity = 0;
  int work_capacity = 0;
  uint8_t* device_inputs = nullptr;  // in kv_meta_region
  std::array<Slot, 2> slots;
  int64_t launched = 0;
  int64_t waited = 0;
  Slot* recording = nullptr;  // the slot whose step EnqueueStep is timing, or null

  // CUDA graphs of decode steps keyed by (num_seqs bucket, max_blocks bucket); the policy
  // decides which buckets keep one (at most options.max_cuda_graphs, least recently used out).
  std::map<GraphCachePolicy::Key, cudaGraphExec_t> graphs;
  void* registered_host = nullptr;  // page-locked host tier (RegisterHostMemory), or null
  GraphCachePolicy graph_policy{0};

  ~Impl();
  [[nodiscard]] Status Init(const Model* model, uint64_t random_seed);
  [[nodiscard]] Status AllocateScratch();
  // cuda_weights.cpp
  [[nodiscard]] Status UploadWeights(const Model& model);
  [[nodiscard]] Status RandomWeights(uint64_t seed);
  // The matrices' types on the device, e.g. "q4_k, q6_k as stored; f16".
  [[nodiscard]] std::string DescribeWeights() const;
  [[nodiscard]] Status InitKvCache(const KvSpec& spec, int num_blocks);
  // INVALID_ARGUMENT ("<what>: bad block id or size") unless block `id` exists and `bytes` is
  // one block's size.
  [[nodiscard]] Status CheckBlock(int32_t id, size_t bytes, const char* what) const;
  void FreeKvCache();
  void ClearGraphs();
  [[nodiscard]] Status SetDevice() const;
  [[nodiscard]] Status Drain();  // waits for every launched step (their slots stay in flight)

  // cuda_forward.cpp
  [[nodiscard]] Status ValidateBatch(const ForwardBatch& b) const;
  [[nodiscard]] StepPlan MakePlan(const ForwardBatch& b) const;
  void PackInputs(const ForwardBatch& b, const StepPlan& plan, uint8_t* dst) const;
  [[nodiscard]] Status EnqueueStep(const StepPlan& plan);
  [[nodiscard]] Status RunStep(const StepPlan& plan);  // graph replay or EnqueueStep
  // y[T][rows of w] = x[T][cols] * w^T (+ y when accumulate); x in act. Float parts run on
  // cuBLAS; quantized ones through the matrix-vector kernel below options.quant_gemm_min_tokens
  // tokens, else decoded into `dequant` a tile of rows at a time for the cuBLAS GEMM.
  [[nodiscard]] Status Gemm(const StackedMatrix& w, const void* x, int num_tokens, float* y, bool accumulate);
  // cuBLAS: y[T][rows] (rows ldy apart) = x[T][cols] * w^T (+ y), w and x in act.
  [[nodiscard]] Status FloatGemm(const void* w, int rows, int cols, const void* x, int num_tokens, float* y, int ldy,
                                 bool accumulate);
  [[nodiscard]] Status Launch(const ForwardBatch& b, Profiler* profiler);
  [[nodiscard]] Status Wait(std::span<float> logits);
  // Records a timing event after an operation of `op` (profiled steps only).
  [[nodiscard]] Status Mark(ProfileOp op);
  // Layout of the input buffer for the given sizes (offsets and total).
  static void LayoutInputs(StepPlan* plan, int num_work);

  cuda::KvLayerView LayerView(int layer) const;
  int q_dim() const { return config.q_dim(); }
  int kv_dim() const { return config.kv_dim(); }
  int qkv_dim() const { return config.q_dim() + 2 * config.kv_dim(); }
};

constexpr size_t kCublasWorkspaceBytes = 32u << 20;
// Values of a quantized matrix decoded for one GEMM at most (32 MiB of F16): the scratch stays
// small next to a large vocabulary's output matrix, and each GEMM still has thousands of rows.
constexpr int64_t kDequantTileValues = 16 << 20;
// Split-K partial rows per sequence slot and query head (bounds splits at large batches).
constexpr int kMaxSplitsPerSeqHead = 8;
// Shortest key range one decode split takes.
constexpr int kMinSplitKeys = 256;

}  // namespace kvserve
