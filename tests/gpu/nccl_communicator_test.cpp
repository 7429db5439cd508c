// The NCCL communicator on every visible GPU, one rank per device in threads of this process:
// sum all-reduce, broadcast from rank 0 and all-gather give the exact expected values. Built
// with -DKVSERVE_NCCL=ON only; skips without a CUDA device.
#include <gtest/gtest.h>

#ifdef KVSERVE_HAVE_NCCL

#include <thread>
#include <vector>

#include "engine/backend/cuda/nccl_communicator.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve {
namespace nccl_communicator_test {

TEST(NcclCommunicator, AllReduceBroadcastAllGatherOnEveryDevice) {
  REQUIRE_CUDA_DEVICE();
  int devices = 0;
  ASSERT_CUDA_OK(cudaGetDeviceCount(&devices));
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const size_t n = 1000;
  std::vector<std::vector<float>> reduced(devices), broadcast(devices), gathered(devices);
  std::vector<Status> errors(devices);
  std::vector<std::thread> ranks;
  for (int r = 0; r < devices; ++r) {
    ranks.emplace_back([&, r] {
      errors[r] = [&]() -> Status {
        ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm, NcclCommunicator::Create(*id, devices, r, r));
        std::vector<float> host(n);
        for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(r + 1) * i;
        testing::DeviceBuffer<float> a(host), b(host), g(n * devices);
        RETURN_IF_ERROR(comm->AllReduceSum(a.get(), n, NcclCommunicator::DataType::kF32, nullptr));
        RETURN_IF_ERROR(comm->Broadcast(b.get(), n, NcclCommunicator::DataType::kF32, 0, nullptr));
        RETURN_IF_ERROR(comm->AllGather(a.get(), g.get(), n, NcclCommunicator::DataType::kF32, nullptr));
        reduced[r] = a.Download();
        broadcast[r] = b.Download();
        gathered[r] = g.Download();
        return OkStatus();
      }();
    });
  }
  for (std::thread& t : ranks) t.join();
  const float world_sum = devices * (devices + 1) / 2.0f;
  for (int r = 0; r < devices; ++r) {
    ASSERT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r].ToString();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(reduced[r][i], world_sum * i);
      ASSERT_EQ(broadcast[r][i], static_cast<float>(i));
      for (int q = 0; q < devices; ++q) ASSERT_EQ(gathered[r][q * n + i], world_sum * i);
    }
  }
}

}  // namespace nccl_communicator_test
}  // namespace kvserve

#endif  // KVSERVE_HAVE_NCCL
