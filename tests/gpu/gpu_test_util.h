// Helpers for the GPU tests: skip without a device, RAII device buffers, seeded random data.
// Every test that touches the device starts with REQUIRE_CUDA_DEVICE(), so on a machine
// without a GPU (or driver) the whole suite skips instead of failing; with
// KVSERVE_GPU_REQUIRED=1 (tests/gpu/run.sh on a machine that has a GPU) an unusable device —
// a driver/runtime mismatch, say — fails every test instead.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "tests/test_paths.h"

#define REQUIRE_CUDA_DEVICE()                                                                      \
  do {                                                                                             \
    if (!::kvserve::CudaDeviceAvailable()) {                                                       \
      if (::kvserve::testing::GpuRunRequiresEverything()) {                                        \
        FAIL() << "no usable CUDA device (KVSERVE_GPU_REQUIRED=1): "                               \
               << ::kvserve::CudaUnavailableReason();                                              \
      }                                                                                            \
      GTEST_SKIP() << "no CUDA device: " << ::kvserve::CudaUnavailableReason();                    \
    }                                                                                              \
  } while (0)

#define ASSERT_CUDA_OK(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t kv_cuda_err_ = (expr);                                                   \
    ASSERT_EQ(kv_cuda_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(kv_cuda_err_); \
  } while (0)

namespace kvserve::testing {

// A device copy of a host vector (or `n` zeroed elements); frees on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr_, 0, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(ptr_); }

  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }
  std::vector<T> Download() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Activations in (out of) the bytes of an activation type, F16/BF16 rounded to nearest even.
inline const char* ActName(cuda::ActType t) {
  return t == cuda::ActType::kF32 ? "f32" : t == cuda::ActType::kF16 ? "f16" : "bf16";
}

inline std::vector<uint8_t> EncodeAct(const std::vector<float>& v, cuda::ActType t) {
  std::vector<uint8_t> out(v.size() * cuda::ActBytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == cuda::ActType::kF32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h = t == cuda::ActType::kF16 ? F32ToF16(v[i]) : F32ToBf16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

inline std::vector<float> DecodeAct(const std::vector<uint8_t>& bytes, cuda::ActType t) {
  const size_t n = bytes.size() / cuda::ActBytes(t);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == cuda::ActType::kF32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = t == cuda::ActType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
    }
  }
  return out;
}

inline float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace kvserve::testing
