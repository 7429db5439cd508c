// CUDA backend plumbing outside the step: Status from CUDA/cuBLAS errors, device regions,
// device detection, the factories, KV capacity planning and the bandwidth probe.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace kvserve {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  std::string msg = fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
  switch (e) {
    case cudaErrorMemoryAllocation: return ResourceExhaustedError(std::move(msg));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return UnavailableError(std::move(msg));
    default: return InternalError(std::move(msg));
  }
}

Status CublasStatus(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return OkStatus();
  std::string msg = fmt::format("{}: {} ({})", what, cublasGetStatusName(e), cublasGetStatusString(e));
  return e == CUBLAS_STATUS_ALLOC_FAILED ? ResourceExhaustedError(std::move(msg)) : InternalError(std::move(msg));
}

// ---- DeviceRegion ----

Status DeviceRegion::Allocate(size_t bytes, const char* what) {
  Release();
  if (bytes == 0) return OkStatus();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return ResourceExhaustedError(fmt::format("cannot allocate {:.2f} GiB of device memory for {}: {}",
                                              bytes / double(1ull << 30), what, cudaGetErrorString(e)));
  }
  base_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  used_ = 0;
  return OkStatus();
}

void DeviceRegion::Release() {
  if (base_ != nullptr) (void)cudaFree(base_);
  base_ = nullptr;
  size_ = used_ = 0;
}

void* DeviceRegion::Take(size_t bytes) {
  const size_t aligned = Align(bytes);
  CHECK_LE(used_ + aligned, size_) << "device region overflow";
  void* p = base_ + used_;
  used_ += aligned;
  return p;
}

// ---- Device queries ----

bool CudaDeviceAvailable() { return CudaUnavailableReason().empty(); }

std::string CudaUnavailableReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("no usable CUDA device: {}", cudaGetErrorString(e));
  }
  return n > 0 ? std::string() : std::string("no CUDA device");
}

namespace {

Status ValidateShape(const ModelConfig& c, const CudaBackendOptions& o) {
  RETURN_IF_ERROR(c.Validate());
  if (c.head_dim > 256 || c.head_dim % 2 != 0) {
    return UnimplementedError(fmt::format("CUDA backend: head dim {} (supported: even, up to 256)", c.head_dim));
  }
  if (o.limits.max_num_tokens <= 0 || o.limits.max_num_seqs <= 0 || o.limits.max_logits <= 0) {
    return InvalidArgumentError("CUDA backend: limits must be positive");
  }
  if (o.max_model_len < 0) return InvalidArgumentError("CUDA backend: negative max_model_len");
  return OkStatus();
}

StatusOr<std::unique_ptr<CudaBackend>> CreateBackend(const ModelConfig& config, const Model* model, uint64_t seed,
                                                     const CudaBackendOptions& options,
                                                     std::optional<GgmlType> quantized = std::nullopt) {
  const std::string reason = CudaUnavailableReason();
  if (!reason.empty()) return UnavailableError(reason);
  RETURN_IF_ERROR(ValidateShape(config, options));
  auto impl = std::make_unique<CudaBackend::Impl>();
  impl->config = config;
  impl->options = options;
  impl->random_matrix_type = quantized;
  RETURN_IF_ERROR(impl->Init(model, seed));
  return std::make_unique<CudaBackend>(std::move(impl));
}

}  // namespace

// ---- Factories, planning, bandwidth ----

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const Model& model, const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CreateBackend(model.config(), &model, 0, options));
  return std::unique_ptr<Backend>(std::move(b));
}

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackendWithRandomWeights(const ModelConfig& config, uint64_t seed,
                                                                          const CudaBackendOptions& options,
                                                                          std::optional<GgmlType> quantized) {
  if (quantized && !(*quantized == GgmlType::kQ8_0 || *quantized == GgmlType::kQ4_0 ||
                     *quantized == GgmlType::kQ4_K || *quantized == GgmlType::kQ6_K)) {
    return InvalidArgumentError(fmt::format("random {} weights: kvserve encodes q8_0, q4_0, q4_k and q6_k",
                                            GgmlTypeName(*quantized)));
  }
  return CreateBackend(config, nullptr, seed, options, quantized);
}

StatusOr<int> PlanCudaKvBlocks(size_t block_bytes, const CudaKvBudget& budget, int device) {
  const std::string reason = CudaUnavailableReason();
  if (!reason.empty()) return UnavailableError(reason);
  if (budget.kv_cache_bytes <= 0 && !(budget.gpu_memory_utilization > 0.0 && budget.gpu_memory_utilization <= 1.0)) {
    return InvalidArgumentError(fmt::format("gpu memory utilization {} outside (0, 1]", budget.gpu_memory_utilization));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t blocks = KvBlocksForMemory(static_cast<int64_t>(total_bytes), static_cast<int64_t>(free_bytes),
                                           block_bytes, budget);
  if (blocks <= 0) {
    return ResourceExhaustedError(fmt::format(
        "no device memory left for the KV cache: {:.2f} GiB free of {:.2f} GiB, utilization {}, kv-cache-memory {} "
        "bytes, block {} bytes",
        free_bytes / double(1ull << 30), total_bytes / double(1ull << 30), budget.gpu_memory_utilization,
        budget.kv_cache_bytes, block_bytes));
  }
  return static_cast<int>(blocks);
}

StatusOr<double> MeasureCudaCopyBandwidth(size_t bytes, int device) {
  const std::string reason = CudaUnavailableReason();
  if (!reason.empty()) return UnavailableError(reason);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  bytes = std::max<size_t>(bytes / 16 * 16, 16);
  DeviceRegion region;
  RETURN_IF_ERROR(region.Allocate(2 * DeviceRegion::Align(bytes), "bandwidth test"));
  void* src = region.Take(bytes);
  void* dst = region.Take(bytes);
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  double bytes_per_second = 0.0;
  Status st = [&]() -> Status {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(src, 1, bytes, stream));
    CUDA_RETURN_IF_ERROR(cuda::LaunchCopy16(src, dst, static_cast<int64_t>(bytes / 16), stream));  // warm-up
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
    constexpr int kIters = 10;
    for (int i = 0; i < kIters; ++i) {
      CUDA_RETURN_IF_ERROR(cuda::LaunchCopy16(src, dst, static_cast<int64_t>(bytes / 16), stream));
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
    if (ms <= 0.0f) return InternalError("bandwidth test measured no time");
    bytes_per_second = 2.0 * static_cast<double>(bytes) * kIters / (ms * 1e-3);
    return OkStatus();
  }();
  if (start != nullptr) (void)cudaEventDestroy(start);
  if (stop != nullptr) (void)cudaEventDestroy(stop);
  (void)cudaStreamDestroy(stream);
  RETURN_IF_ERROR(st);
  return bytes_per_second;
}

}  // namespace kvserve
