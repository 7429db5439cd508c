// The KV capacity policy behind `--gpu-memory-utilization` / `--kv-cache-memory` (pure
// arithmetic: runs on every machine, device or not).
#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"

namespace kvserve {
namespace kv_budget_test {

constexpr int64_t kGiB = 1ll << 30;

TEST(KvBudget, UtilizationShareMinusWhatIsAlreadyUsed) {
  CudaKvBudget b;
  b.gpu_memory_utilization = 0.75;
  b.reserve_bytes = 0;
  // 100 GiB device, 20 GiB in use (weights, scratch, others): 75 - 20 = 55 GiB of 1 MiB blocks.
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 80 * kGiB, 1 << 20, b), 55 * 1024);
  // The share is already exceeded: nothing.
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 5 * kGiB, 1 << 20, b), 0);
}

TEST(KvBudget, ExplicitBytesWinButNeverExceedFreeMinusReserve) {
  CudaKvBudget b;
  b.kv_cache_bytes = 10 * kGiB;
  b.reserve_bytes = 1 * kGiB;
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 50 * kGiB, kGiB, b), 10);
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 8 * kGiB, kGiB, b), 7);  // capped at free - reserve
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, kGiB / 2, kGiB, b), 0);
}

TEST(KvBudget, RoundsDownToWholeBlocksAndHandlesDegenerateInput) {
  CudaKvBudget b;
  b.kv_cache_bytes = 10 * 1000 + 999;
  b.reserve_bytes = 0;
  EXPECT_EQ(KvBlocksForMemory(kGiB, kGiB, 1000, b), 10);
  EXPECT_EQ(KvBlocksForMemory(kGiB, kGiB, 0, b), 0);
  EXPECT_EQ(KvBlocksForMemory(0, 0, 1000, b), 0);
  b.kv_cache_bytes = 1ll << 50;  // more blocks than an int holds: capped
  EXPECT_EQ(KvBlocksForMemory(1ll << 52, 1ll << 52, 1, b), INT32_MAX);
}

}  // namespace kv_budget_test
}  // namespace kvserve
