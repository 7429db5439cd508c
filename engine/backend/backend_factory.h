// The one place that picks and builds a backend. Everything above engine/backend (the engine,
// the CLI, tools, benchmarks) creates backends here and never includes cpu/cpu_backend.h or
// cuda/cuda_backend.h; the backend's limits are derived from the engine's budgets here once.
//
// Devices: "cpu" (always) and "cuda" (a build with CUDA and a usable device; a build without
// it links a stub that answers UNAVAILABLE "built without CUDA"). Thread-safe functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/compute_dtype.h"
#include "engine/model/weights.h"

namespace kvserve {

struct BackendConfig {
  std::string device = "cpu";         // "cpu" or "cuda" (ResolveDevice turns "auto" into one)
  int max_num_batched_tokens = 2048;  // the engine's tokens per step
  int max_num_seqs = 256;             // the engine's running set
  int max_logits = 0;                 // logits rows per step (0: max_num_seqs, one per sequence;
                                      // scoring every prompt position needs more)
  int num_threads = 0;                // cpu: compute threads (0: OpenMP's default, all cores)
  ComputeDtype compute_dtype = ComputeDtype::kF32;  // cpu only (compute_dtype.h)
  int max_model_len = 0;              // cuda: the longest sequence (0: the model's context)
  KvStoreHook kv_store_hook;          // cpu, benchmarks only (backend.h)
};

// What a backend must hold in one Forward for an engine of `config`'s budgets.
[[nodiscard]] BackendLimits LimitsFor(const BackendConfig& config);

// "auto" -> "cuda" where a CUDA device is usable and the CUDA backend implements `model`'s
// computation and the KV cache types `kv_dtypes`, else "cpu"; "cpu" as is; "cuda" without a
// usable device: UNAVAILABLE with the reason; "cuda" for a model or KV type the CUDA backend
// does not implement (windows, Gemma's extras, Q/K norms; int4c): UNIMPLEMENTED naming it;
// anything else: INVALID_ARGUMENT.
[[nodiscard]] StatusOr<std::string> ResolveDevice(std::string_view requested, const ModelConfig& model,
                                                  std::initializer_list<KvDtype> kv_dtypes = {});

// --compute-dtype: "f32", "bf16", "int8", or "auto" (bf16 where this CPU's native BF16
// products measure faster than F32 multiply-adds, else int8: see cpu::AutoComputeDtype);
// INVALID_ARGUMENT for other text and for bf16 on a device that is not "cpu" (auto, f32 and
// int8, the CLI's default, give kF32 there).
[[nodiscard]] StatusOr<ComputeDtype> ResolveComputeDtype(std::string_view requested, std::string_view device);

// Bytes the CPU backend holds for a weight tensor of `num_elements` values of `type` in int8
// compute (the default): quantized tensors in integer-dot panels (0.41-1.125 bytes per weight,
// engine/backend/cpu/kernels.h), others as the file's `file_bytes`.
[[nodiscard]] int64_t CpuWeightBytes(GgmlType type, int64_t num_elements, int64_t file_bytes);

// REQUIRES: `model` outlives the backend.
[[nodiscard]] StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendConfig& config, const Model& model);

// The KV pool of a device backend (`--gpu-memory-utilization`, `--kv-cache-memory`), sized
// after the backend exists so its weights and scratch count as used device memory.
struct DeviceKvBudget {
  double gpu_memory_utilization = 0.9;  // fraction of the device's memory this process may fill
  int64_t kv_cache_bytes = 0;           // > 0: exactly this many bytes instead
};
// Blocks of `block_bytes` that fit `budget` on the device of `config`; RESOURCE_EXHAUSTED when
// not even one fits. REQUIRES: config.device == "cuda".
[[nodiscard]] StatusOr<int> PlanDeviceKvBlocks(const BackendConfig& config, size_t block_bytes,
                                               const DeviceKvBudget& budget);

}  // namespace kvserve
