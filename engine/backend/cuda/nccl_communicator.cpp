#include "engine/backend/cuda/nccl_communicator.h"

#include <nccl.h>

#include <cstring>
#include <fmt/format.h>

namespace kvserve {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclCommunicator::UniqueId::bytes));

ncclDataType_t NcclType(NcclCommunicator::DataType t) {
  switch (t) {
    case NcclCommunicator::DataType::kF32: return ncclFloat32;
    case NcclCommunicator::DataType::kF16: return ncclFloat16;
    case NcclCommunicator::DataType::kBF16: return ncclBfloat16;
    case NcclCommunicator::DataType::kInt32: return ncclInt32;
    case NcclCommunicator::DataType::kUint8: return ncclUint8;
  }
  return ncclUint8;
}

Status NcclStatus(ncclResult_t r, const char* what, const char* detail) {
  if (r == ncclSuccess) return OkStatus();
  std::string msg = fmt::format("{}: {}{}{}", what, ncclGetErrorString(r), detail ? ": " : "", detail ? detail : "");
  return r == ncclInvalidArgument || r == ncclInvalidUsage ? InvalidArgumentError(std::move(msg))
                                                            : InternalError(std::move(msg));
}

}  // namespace

StatusOr<NcclCommunicator::UniqueId> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr));
  UniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const UniqueId& id, int world_size, int rank,
                                                                     int device) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return InvalidArgumentError(fmt::format("NCCL rank {} outside a world of {}", rank, world_size));
  }
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(fmt::format("NCCL rank {}: cudaSetDevice({}): {}", rank, device, cudaGetErrorString(e)));
  }
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, world_size, nid, rank), "ncclCommInitRank", nullptr));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, world_size, rank, device));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    (void)cudaSetDevice(device_);
    (void)ncclCommDestroy(comm_);
  }
}

Status NcclCommunicator::Check(int result, const char* what) const {
  return NcclStatus(static_cast<ncclResult_t>(result), what, result == ncclSuccess ? nullptr : ncclGetLastError(comm_));
}

Status NcclCommunicator::AllReduceSum(void* data, size_t count, DataType type, cudaStream_t stream) {
  return Check(ncclAllReduce(data, data, count, NcclType(type), ncclSum, comm_, stream), "ncclAllReduce");
}

Status NcclCommunicator::Broadcast(void* data, size_t count, DataType type, int root, cudaStream_t stream) {
  if (root < 0 || root >= world_size_) return InvalidArgumentError("NCCL broadcast root out of range");
  return Check(ncclBroadcast(data, data, count, NcclType(type), root, comm_, stream), "ncclBroadcast");
}

Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream) {
  return Check(ncclAllGather(send, recv, count, NcclType(type), comm_, stream), "ncclAllGather");
}

}  // namespace kvserve
