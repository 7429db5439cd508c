// KVSERVE_GPU_REQUIRED=1 (set by tests/gpu/run.sh where a GPU is present) turns the GPU
// tests' skips into failures: no usable device, or missing reference files, fail loudly.
// Runs everywhere: without a device it checks the failure, with one that nothing fails.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/gpu/gpu_test_util.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace gpu_required_test {

void RequireDevice() { REQUIRE_CUDA_DEVICE(); }
void RequireMissingFile() { REQUIRE_SHARED_FILE("no/such/reference-file.bin"); }

// Sets KVSERVE_GPU_REQUIRED for one test and restores it.
class GpuRequired : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("KVSERVE_GPU_REQUIRED");
    had_ = v != nullptr;
    if (had_) old_ = v;
    setenv("KVSERVE_GPU_REQUIRED", "1", 1);
  }
  void TearDown() override {
    if (had_) {
      setenv("KVSERVE_GPU_REQUIRED", old_.c_str(), 1);
    } else {
      unsetenv("KVSERVE_GPU_REQUIRED");
    }
  }
  bool had_ = false;
  std::string old_;
};

TEST_F(GpuRequired, AnUnusableDeviceFailsInsteadOfSkipping) {
  if (CudaDeviceAvailable()) {
    EXPECT_NO_FATAL_FAILURE(RequireDevice());
  } else {
    EXPECT_FATAL_FAILURE(RequireDevice(), "no usable CUDA device (KVSERVE_GPU_REQUIRED=1)");
  }
}

TEST_F(GpuRequired, AMissingReferenceFileFailsInsteadOfSkipping) {
  EXPECT_FATAL_FAILURE(RequireMissingFile(), "reference file missing (KVSERVE_GPU_REQUIRED=1)");
}

}  // namespace gpu_required_test
}  // namespace kvserve
