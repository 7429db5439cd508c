// cuBLAS is opened on first use (engine/backend/cuda/cuda_blas_loader.cpp), not at process
// start. Needs no device: the toolkit's libcublas answers status queries without one. Runs in
// every CUDA build (CI included), as ctest runs it: in a process of its own.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace kvserve {
namespace cuda_blas_loader_test {

bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcublas.so") != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLoader, OpensTheLibraryOnFirstUseOnly) {
  EXPECT_FALSE(CublasMapped()) << "libcublas was loaded at process start (linked instead of opened on use)";
  // Answered by the real library: the forwarders found it and its symbols.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_TRUE(CublasMapped());
  // Without a device cublasCreate fails inside cuBLAS, never with the loader's message.
  cublasHandle_t handle = nullptr;
  const cublasStatus_t status = cublasCreate(&handle);
  EXPECT_EQ(std::string(cublasGetStatusString(status)).find("could not be loaded"), std::string::npos)
      << cublasGetStatusString(status);
  if (status == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  }
}

}  // namespace cuda_blas_loader_test
}  // namespace kvserve
