// CudaBackend: the Llama forward pass on one NVIDIA GPU over a paged KV cache in device memory.
//
// What lives on the device: the weights — quantized GGUF matrices (Q4_0 ... Q8_0, Q2_K ... Q6_K,
// IQ4_NL, IQ4_XS) exactly as the file stores them, float ones in the activation type (F16 by
// default; BF16 or F32 on request; others converted at load); the QKV and gate/up matrices of a
// layer are stacked so each is one product where their types agree — the KV arena (one cudaMalloc of num_blocks *
// KvSpec::block_bytes() made by InitKvCache, laid out exactly as kv_spec.h says, so
// ReadBlock/WriteBlock move the same bytes as the CPU backend), and scratch sized once from
// BackendLimits. Forward allocates nothing.
//
// A step: the flat batch is validated and packed on the host into one pinned staging buffer,
// copied with ONE cudaMemcpyAsync, then per layer: RMSNorm -> QKV GEMM (cuBLAS, F16 x F16 ->
// F32 with FP32 accumulation on tensor cores; a quantized matrix goes through a matrix-vector
// kernel that decodes its blocks in registers below quant_gemm_min_tokens tokens, and is
// decoded into F16 scratch for the cuBLAS GEMM from there) -> RoPE (q pre-scaled by 1/sqrt(head_dim)) ->
// fused append+quantize of K/V at the slot mapping -> paged attention (one CTA per
// (work item, kv head) serving the n_rep query heads of that kv head; decode steps split long
// contexts over several CTAs and combine them in a second pass) -> O GEMM accumulating into
// the residual -> RMSNorm -> gate/up GEMM -> SwiGLU -> down GEMM into the residual; then the
// final norm of the logits rows only and the logits GEMM, copied to pinned host memory.
//
// Decode steps (one token per sequence, logits for every sequence) are padded to a bucket of
// (num_seqs, max blocks per sequence) and, from the second time a bucket is seen, replayed
// from a captured CUDA graph (padding rows write no KV and attend to nothing).
//
// Overlap: Forward() is Launch() + Wait(). Launch() enqueues a step and returns at once; two
// steps may be in flight (double-buffered pinned inputs and logits), so a caller that knows
// step N+1's inputs (e.g. other sequences' prefill, or everything but the sampled tokens) can
// build and launch it while the GPU runs step N. The synchronous Forward contract still holds:
// Forward returns that step's logits.
//
// Profiling: with a profiler set (Backend::SetProfiler), steps run eagerly with CUDA events
// between operations, and each operation's device time is added to the profiler in Wait().
//
// Thread model: like every Backend, one thread at a time (the engine thread). Each entry point
// selects the backend's device on the calling thread, so the backend may be created on one
// thread and used on another.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/model/weights.h"

namespace kvserve {

// Element type of the float weight matrices on the device (quantized ones stay as stored) and
// of the activations fed to the products; the residual stream, q/k/v and softmax are always F32.
enum class CudaWeightType : uint8_t { kF16, kBF16, kF32 };

struct CudaBackendOptions {
  BackendLimits limits;
  int device = 0;                                 // CUDA device ordinal
  CudaWeightType weight_type = CudaWeightType::kF16;
  int max_model_len = 0;                          // longest sequence (0: the model's context)
  bool use_cuda_graphs = true;                    // replay decode steps from captured graphs
  int max_cuda_graphs = 64;                       // captured buckets kept (least recently used out)
  // Quantized matrices: steps of at least this many tokens decode each matrix into scratch for
  // the tensor-core GEMM; smaller ones read the blocks in the matrix-vector kernel (one pass
  // over the weights per cuda::kMatVecTokens tokens).
  int quant_gemm_min_tokens = 32;
};

// Counters for tests and benchmarks.
struct CudaBackendStats {
  int64_t steps = 0;
  int64_t decode_steps = 0;
  int64_t graph_replays = 0;
  int64_t graphs_captured = 0;
  int64_t graph_capture_failures = 0;
  int64_t graphs_evicted = 0;  // least recently used graphs dropped for new buckets
};

class CudaBackend final : public Backend {
 public:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  [[nodiscard]] Status InitKvCache(const KvSpec& spec, int num_blocks) override;
  // Launch() + Wait().
  [[nodiscard]] Status Forward(const ForwardBatch& batch, std::span<float> logits) override;
  [[nodiscard]] Status CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override;
  [[nodiscard]] Status ShiftKeys(std::span<const int32_t> blocks, int delta) override;
  [[nodiscard]] Status ReadBlock(int32_t id, std::span<uint8_t> out) const override;
  [[nodiscard]] Status WriteBlock(int32_t id, std::span<const uint8_t> in) override;
  // Every copy queued on the compute stream, one wait at the end (page-locked host memory
  // after RegisterHostMemory, so the copies are asynchronous DMA).
  [[nodiscard]] Status ReadBlocks(std::span<const BlockTransfer> copies) const override;
  [[nodiscard]] Status WriteBlocks(std::span<const BlockTransfer> copies) override;
  // cudaHostRegister (a failure is logged and the copies stay pageable); empty: unregister.
  [[nodiscard]] Status RegisterHostMemory(std::span<uint8_t> memory) override;

  // Validates `batch`, copies what it needs (the caller may reuse its arrays at once) and
  // enqueues the step. At most two steps in flight: FAILED_PRECONDITION otherwise.
  [[nodiscard]] Status Launch(const ForwardBatch& batch);
  // Waits for the oldest launched step and copies its logits [num_logits][vocab] out.
  [[nodiscard]] Status Wait(std::span<float> logits);

  [[nodiscard]] CudaBackendStats stats() const;
  // "NVIDIA H200 (sm_90, 139.8 GiB)".
  [[nodiscard]] std::string device_description() const;
  // Bytes of device memory the weights take (quantized matrices at their file size).
  [[nodiscard]] size_t weight_bytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// True when a CUDA device is present and usable (driver loaded and recent enough). False,
// without logging an error, on machines without a GPU or driver.
[[nodiscard]] bool CudaDeviceAvailable();
// Why CudaDeviceAvailable() is false ("no CUDA device", "CUDA driver version is insufficient
// ...", "built without CUDA"); empty when it is true.
[[nodiscard]] std::string CudaUnavailableReason();

// Uploads `model`'s weights to options.device (the model may be released afterwards; only its
// config is kept). `--device cuda` in the serve command. Without a usable device: UNAVAILABLE.
// The result is a CudaBackend (static_cast to reach Launch/Wait/stats).
[[nodiscard]] StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const Model& model,
                                                                  const CudaBackendOptions& options);
// Benchmarks: a backend of `config`'s shape whose weights are generated on the device
// (normal(0, 0.02) from a counter-based RNG keyed by `seed`, norms 1.0) — a 7B model is built
// in well under a second instead of minutes on the host. The values differ from the CPU
// synthetic models of the same preset. With `quantized` (Q8_0, Q4_0, Q4_K or Q6_K: the types
// kvserve encodes) every matrix is that type instead, quantized on the host once per shape and
// shared by the layers (same work and bytes per step as a real file of that type).
[[nodiscard]] StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackendWithRandomWeights(
    const ModelConfig& config, uint64_t seed, const CudaBackendOptions& options,
    std::optional<GgmlType> quantized = std::nullopt);

// KV capacity planning (`--gpu-memory-utilization`, `--kv-cache-memory`). Call after the
// backend exists (weights and scratch are then already counted as used device memory).
struct CudaKvBudget {
  double gpu_memory_utilization = 0.9;  // fraction of the device's total memory this process may fill
  int64_t kv_cache_bytes = 0;           // > 0: exactly this many bytes for the KV cache instead
  int64_t reserve_bytes = 512ll << 20;  // kept free for cuBLAS, graphs and the CUDA context
};
// Blocks of `block_bytes` that fit the budget on `device` (cudaMemGetInfo); RESOURCE_EXHAUSTED
// when not even one fits.
[[nodiscard]] StatusOr<int> PlanCudaKvBlocks(size_t block_bytes, const CudaKvBudget& budget, int device = 0);

// The policy behind PlanCudaKvBlocks, pure so it is testable anywhere:
//   kv bytes = kv_cache_bytes                         when kv_cache_bytes > 0,
//            = utilization * total - (total - free)   otherwise (memory already in use — this
//                                                     process's weights and scratch, other
//                                                     processes — counts against the share),
//   then capped at free - reserve; blocks = kv bytes / block_bytes, at most INT32_MAX.
// Returns 0 when nothing fits.
[[nodiscard]] inline int64_t KvBlocksForMemory(int64_t total_bytes, int64_t free_bytes, size_t block_bytes,
                                               const CudaKvBudget& budget) {
  if (block_bytes == 0 || total_bytes <= 0) return 0;
  const int64_t used = total_bytes - free_bytes;
  int64_t kv = budget.kv_cache_bytes > 0
                   ? budget.kv_cache_bytes
                   : static_cast<int64_t>(budget.gpu_memory_utilization * static_cast<double>(total_bytes)) - used;
  kv = std::min(kv, free_bytes - budget.reserve_bytes);
  if (kv <= 0) return 0;
  return std::min<int64_t>(kv / static_cast<int64_t>(block_bytes), INT32_MAX);
}

// Device memory bandwidth in bytes/s, measured with a copy kernel over two buffers of `bytes`
// each (read + write both counted).
[[nodiscard]] StatusOr<double> MeasureCudaCopyBandwidth(size_t bytes, int device = 0);

}  // namespace kvserve
