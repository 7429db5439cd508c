// The CUDA entry points of a build without CUDA (KVSERVE_CUDA=OFF; compiled only then): every
// factory answers UNAVAILABLE "built without CUDA" and no device is ever available, so
// `--device cuda` fails with a clear message and `--device` defaults to cpu.
#include "engine/backend/cuda/cuda_backend.h"

namespace kvserve {
namespace {
constexpr char kNoCuda[] = "built without CUDA (configure with -DKVSERVE_CUDA=ON where nvcc exists)";
}  // namespace

// No CudaBackend is ever created here; its members exist so the type links.
struct CudaBackend::Impl {};
CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;
Status CudaBackend::InitKvCache(const KvSpec&, int) { return UnavailableError(kNoCuda); }
Status CudaBackend::Forward(const ForwardBatch&, std::span<float>) { return UnavailableError(kNoCuda); }
Status CudaBackend::CopyBlocks(std::span<const std::pair<int32_t, int32_t>>) { return UnavailableError(kNoCuda); }
Status CudaBackend::ShiftKeys(std::span<const int32_t>, int) { return UnavailableError(kNoCuda); }
Status CudaBackend::ReadBlock(int32_t, std::span<uint8_t>) const { return UnavailableError(kNoCuda); }
Status CudaBackend::WriteBlock(int32_t, std::span<const uint8_t>) { return UnavailableError(kNoCuda); }
Status CudaBackend::ReadBlocks(std::span<const BlockTransfer>) const { return UnavailableError(kNoCuda); }
Status CudaBackend::WriteBlocks(std::span<const BlockTransfer>) { return UnavailableError(kNoCuda); }
Status CudaBackend::RegisterHostMemory(std::span<uint8_t>) { return UnavailableError(kNoCuda); }
Status CudaBackend::Launch(const ForwardBatch&) { return UnavailableError(kNoCuda); }
Status CudaBackend::Wait(std::span<float>) { return UnavailableError(kNoCuda); }
CudaBackendStats CudaBackend::stats() const { return {}; }
std::string CudaBackend::device_description() const { return kNoCuda; }
size_t CudaBackend::weight_bytes() const { return 0; }

bool CudaDeviceAvailable() { return false; }

std::string CudaUnavailableReason() { return kNoCuda; }

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const Model&, const CudaBackendOptions&) {
  return UnavailableError(kNoCuda);
}

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackendWithRandomWeights(const ModelConfig&, uint64_t,
                                                                          const CudaBackendOptions&,
                                                                          std::optional<GgmlType>) {
  return UnavailableError(kNoCuda);
}

StatusOr<int> PlanCudaKvBlocks(size_t, const CudaKvBudget&, int) { return UnavailableError(kNoCuda); }

StatusOr<double> MeasureCudaCopyBandwidth(size_t, int) { return UnavailableError(kNoCuda); }

}  // namespace kvserve
