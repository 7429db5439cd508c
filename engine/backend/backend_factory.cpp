#include "engine/backend/backend_factory.h"

#include "common/check.h"

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"

namespace kvserve {

BackendLimits LimitsFor(const BackendConfig& config) {
  BackendLimits limits;
  limits.max_num_tokens = config.max_num_batched_tokens;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_logits = config.max_logits > 0 ? config.max_logits : config.max_num_seqs;
  return limits;
}

StatusOr<std::string> ResolveDevice(std::string_view requested, const ModelConfig& model,
                                    std::initializer_list<KvDtype> kv_dtypes) {
  bool cpu_only_kv = false;
  for (KvDtype d : kv_dtypes) cpu_only_kv = cpu_only_kv || KeysPerChannel(d);
  if (requested == "cpu") return std::string("cpu");
  if (requested == "auto") {
    return std::string(CudaDeviceAvailable() && !model.NeedsBeyondLlama() && !cpu_only_kv ? "cuda" : "cpu");
  }
  if (requested == "cuda") {
    if (!CudaDeviceAvailable()) return UnavailableError("--device cuda: " + CudaUnavailableReason());
    if (model.NeedsBeyondLlama()) {
      return UnimplementedError("--device cuda: the CUDA backend does not run " + model.architecture +
                                " models yet (it runs the llama, mistral and qwen2 computation); use --device cpu");
    }
    if (cpu_only_kv) {
      return UnimplementedError("--device cuda: the int4c KV cache runs on the CPU backend only so far; use int4 "
                                "or int8 with CUDA, or --device cpu");
    }
    return std::string("cuda");
  }
  return InvalidArgumentError("unknown device '" + std::string(requested) + "' (cpu, cuda or auto)");
}

StatusOr<ComputeDtype> ResolveComputeDtype(std::string_view requested, std::string_view device) {
  if (device != "cpu") {
    // int8 is the CLI's default: the CUDA backend's products are its own (F32 accumulation).
    if (requested == "auto" || requested == "f32" || requested == "int8") return ComputeDtype::kF32;
    return InvalidArgumentError("--compute-dtype " + std::string(requested) +
                                ": only the CPU backend has a BF16 compute mode; use f32 or auto with --device " +
                                std::string(device));
  }
  if (requested == "auto") return cpu::AutoComputeDtype();
  if (std::optional<ComputeDtype> d = ParseComputeDtype(requested)) return *d;
  return InvalidArgumentError("--compute-dtype: '" + std::string(requested) + "' is not f32, bf16, int8 or auto");
}

int64_t CpuWeightBytes(GgmlType type, int64_t num_elements, int64_t file_bytes) {
  const int kind = cpu::DotKind(type);
  if (kind < 0) return file_bytes;
  constexpr int64_t kCols = 4096;  // a multiple of every block; the panels' 64-byte padding aside
  const double per_weight = static_cast<double>(cpu::DotPanelBytes(kind, kCols)) / (kCols * cpu::kPanelRows);
  return static_cast<int64_t>(static_cast<double>(num_elements) * per_weight);
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendConfig& config, const Model& model) {
  if (config.device == "cpu") {
    CpuBackendOptions options;
    options.limits = LimitsFor(config);
    options.num_threads = config.num_threads;
    options.compute_dtype = config.compute_dtype;
    options.kv_store_hook = config.kv_store_hook;
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(model, options));
  }
  if (config.device == "cuda") {
    if (config.compute_dtype != ComputeDtype::kF32) {
      return InvalidArgumentError("--compute-dtype " + std::string(ComputeDtypeName(config.compute_dtype)) +
                                  ": only the CPU backend has BF16 and int8 compute modes");
    }
    CudaBackendOptions options;
    options.limits = LimitsFor(config);
    options.max_model_len = config.max_model_len;
    return CreateCudaBackend(model, options);
  }
  return InvalidArgumentError("unknown device '" + config.device + "' (cpu or cuda)");
}

StatusOr<int> PlanDeviceKvBlocks(const BackendConfig& config, size_t block_bytes, const DeviceKvBudget& budget) {
  CHECK(config.device == "cuda") << config.device;
  CudaKvBudget cuda;
  cuda.gpu_memory_utilization = budget.gpu_memory_utilization;
  cuda.kv_cache_bytes = budget.kv_cache_bytes;
  return PlanCudaKvBlocks(block_bytes, cuda);
}

}  // namespace kvserve
