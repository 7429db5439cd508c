// NcclCommunicator: one rank's handle on a NCCL communicator, the transport of tensor
// parallelism (docs/tensor-parallel.md): sum all-reduces after the row-parallel projections,
// the broadcast of each step's flat batch from rank 0, the all-gather of vocab-parallel logits.
//
// Rank 0 creates a UniqueId and hands it to the other ranks out of band (they are processes
// or threads of one server); every rank then calls Create with the same id and world size and
// its own rank and device — Create blocks until all ranks have joined. Operations are
// enqueued on the caller's stream (stream-ordered with the backend's kernels and capturable in
// CUDA graphs). One thread per communicator. Built only with -DKVSERVE_NCCL=ON.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

struct ncclComm;  // nccl.h stays out of the header

namespace kvserve {

class NcclCommunicator {
 public:
  struct UniqueId {
    std::array<char, 128> bytes{};  // NCCL_UNIQUE_ID_BYTES
  };
  enum class DataType { kF32, kF16, kBF16, kInt32, kUint8 };

  // Rank 0: a fresh id for a new communicator.
  [[nodiscard]] static StatusOr<UniqueId> NewUniqueId();
  // REQUIRES: 0 <= rank < world_size; every rank passes the same id and world_size.
  [[nodiscard]] static StatusOr<std::unique_ptr<NcclCommunicator>> Create(const UniqueId& id, int world_size, int rank,
                                                                          int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // data[0..count) = sum over ranks, in place.
  [[nodiscard]] Status AllReduceSum(void* data, size_t count, DataType type, cudaStream_t stream);
  // data[0..count) = root's data[0..count), in place.
  [[nodiscard]] Status Broadcast(void* data, size_t count, DataType type, int root, cudaStream_t stream);
  // recv[r * count .. (r + 1) * count) = rank r's send[0..count).
  [[nodiscard]] Status AllGather(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream);

 private:
  NcclCommunicator(ncclComm* comm, int world_size, int rank, int device)
      : comm_(comm), world_size_(world_size), rank_(rank), device_(device) {}
  [[nodiscard]] Status Check(int result, const char* what) const;

  ncclComm* comm_ = nullptr;
  int world_size_ = 0;
  int rank_ = 0;
  int device_ = 0;
};

}  // namespace kvserve
