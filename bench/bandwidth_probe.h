// BandwidthProbe: the machine's memory read bandwidth, measured the way the matrix kernels
// read (OpenMP threads streaming contiguous halves with independent sums), for benchmarks'
// rooflines.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/check.h"

namespace kvserve {

// Read bandwidth in GB/s (1e9 bytes) of `threads` threads summing a 1 GiB buffer. Shared
// virtual machines vary from minute to minute, so the bench measures again right before each
// decode run and reports the median and the range of the passes.
class BandwidthProbe {
 public:
  struct Result {
    double median = 0, min = 0, max = 0;
  };

  explicit BandwidthProbe(int threads) : threads_(threads) {
    data_ = static_cast<uint64_t*>(std::aligned_alloc(64, kBytes));
    CHECK(data_ != nullptr);
    const size_t n = kBytes / sizeof(uint64_t);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (size_t i = 0; i < n; ++i) data_[i] = i;  // fault the pages in, on the threads that read them
  }
  ~BandwidthProbe() { std::free(data_); }

  static uint64_t SumRange(const uint64_t* p, size_t n) {
    uint64_t a[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) a[j] += p[i + j];
    for (; i < n; ++i) a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  }

  Result Measure(int passes) {
    const size_t n = kBytes / sizeof(uint64_t);
    std::vector<double> rates;
    for (int pass = 0; pass < passes; ++pass) {
      uint64_t sum = 0;
      const auto t0 = std::chrono::steady_clock::now();
      // Each thread streams one contiguous half with several independent accumulators, the
      // way the matrix kernels read their panels (a single dependent chain would measure
      // latency, not bandwidth).
#pragma omp parallel num_threads(threads_) reduction(+ : sum)
      {
        const size_t per = n / omp_get_num_threads();
        const size_t begin = per * omp_get_thread_num();
        sum += SumRange(data_ + begin, per);
      }
      rates.push_back(kBytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
      sink_ += sum;
    }
    std::sort(rates.begin(), rates.end());
    return {rates[rates.size() / 2], rates.front(), rates.back()};
  }
  uint64_t sink() const { return sink_; }

 private:
  static constexpr size_t kBytes = size_t{1} << 30;
  int threads_;
  uint64_t* data_ = nullptr;
  uint64_t sink_ = 0;
};

}  // namespace kvserve
