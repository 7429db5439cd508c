// Statistics for `kvserve bench-serve`: percentiles and summaries of latency samples, Poisson
// request arrivals, and length distributions ("uniform:32:96") for prompts and outputs.
//
// Plain values and pure functions; a PoissonArrivals or LengthDistribution is used by one
// thread at a time (the load generator samples them under its own lock).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve::bench {

// The p-th percentile (p in [0, 100]) of `sorted` by linear interpolation between the closest
// ranks (numpy's default): rank = p / 100 * (n - 1).
// REQUIRES: sorted is non-empty and ascending.
[[nodiscard]] double Percentile(std::span<const double> sorted, double p);

struct Summary {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};

// Mean, p50/p90/p99, min and max of `values` (any order); all zero when empty.
[[nodiscard]] Summary Summarize(std::vector<double> values);

// Arrival times of a Poisson process of `rate` requests per second: exponential gaps of mean
// 1 / rate, from a seeded generator (the same seed gives the same schedule). A rate of 0 or
// less (or infinity) means "all at once": every arrival is at time 0.
class PoissonArrivals {
 public:
  PoissonArrivals(double rate, uint64_t seed);

  // Seconds from the start to the next arrival (non-decreasing).
  [[nodiscard]] double Next();

 private:
  bool all_at_once_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  double t_ = 0;
};

// A distribution of lengths in tokens: "N" or "fixed:N", "uniform:A:B" (inclusive), or
// "normal:MEAN:STD" (rounded, at least 1).
class LengthDistribution {
 public:
  LengthDistribution() = default;
  static LengthDistribution Fixed(int n);
  // INVALID_ARGUMENT names the problem (not a number, A > B, a length below 1).
  [[nodiscard]] static StatusOr<LengthDistribution> Parse(std::string_view text);

  // A sample, always >= 1.
  [[nodiscard]] int Sample(std::mt19937_64& rng) const;
  [[nodiscard]] double Mean() const;
  [[nodiscard]] std::string ToString() const;

 private:
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind_ = Kind::kFixed;
  double a_ = 1, b_ = 1;  // fixed: a; uniform: [a, b]; normal: mean a, std b
};

}  // namespace kvserve::bench
