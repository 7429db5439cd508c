// Percentiles, summaries, Poisson arrivals and length distributions for bench-serve.
#include "tools/loadgen/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace kvserve::bench {
namespace {

bool ParseDouble(std::string_view s, double* out) {
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = text.find(sep);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

}  // namespace

double Percentile(std::span<const double> sorted, double p) {
  CHECK(!sorted.empty());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

PoissonArrivals::PoissonArrivals(double rate, uint64_t seed)
    : all_at_once_(!(rate > 0) || std::isinf(rate)), rng_(seed), gap_(all_at_once_ ? 1.0 : rate) {}

double PoissonArrivals::Next() {
  if (all_at_once_) return 0;
  t_ += gap_(rng_);
  return t_;
}

LengthDistribution LengthDistribution::Fixed(int n) {
  LengthDistribution d;
  d.kind_ = Kind::kFixed;
  d.a_ = d.b_ = std::max(1, n);
  return d;
}

StatusOr<LengthDistribution> LengthDistribution::Parse(std::string_view text) {
  const std::vector<std::string_view> parts = Split(text, ':');
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("length distribution '{}': {} (use N, fixed:N, uniform:A:B or "
                                            "normal:MEAN:STD)", text, why));
  };
  std::vector<double> args;
  const bool bare = parts.size() == 1;
  for (size_t i = bare ? 0 : 1; i < parts.size(); ++i) {
    double v = 0;
    if (!ParseDouble(parts[i], &v)) return bad(fmt::format("'{}' is not a number", parts[i]));
    args.push_back(v);
  }
  LengthDistribution d;
  const std::string_view kind = bare ? "fixed" : parts[0];
  if (kind == "fixed") {
    if (args.size() != 1) return bad("fixed takes one length");
    if (args[0] < 1) return bad("lengths must be at least 1");
    d.kind_ = Kind::kFixed;
    d.a_ = d.b_ = std::round(args[0]);
  } else if (kind == "uniform") {
    if (args.size() != 2) return bad("uniform takes a minimum and a maximum");
    if (args[0] < 1) return bad("lengths must be at least 1");
    if (args[0] > args[1]) return bad("the minimum is larger than the maximum");
    d.kind_ = Kind::kUniform;
    d.a_ = std::round(args[0]);
    d.b_ = std::round(args[1]);
  } else if (kind == "normal") {
    if (args.size() != 2) return bad("normal takes a mean and a standard deviation");
    if (args[0] < 1 || args[1] < 0) return bad("the mean must be at least 1 and the deviation not negative");
    d.kind_ = Kind::kNormal;
    d.a_ = args[0];
    d.b_ = args[1];
  } else {
    return bad(fmt::format("unknown kind '{}'", kind));
  }
  return d;
}

int LengthDistribution::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int>(a_);
    case Kind::kUniform:
      return static_cast<int>(
          std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a_), static_cast<int64_t>(b_))(rng));
    case Kind::kNormal:
      return std::max(1, static_cast<int>(std::lround(std::normal_distribution<double>(a_, b_)(rng))));
  }
  return 1;
}

double LengthDistribution::Mean() const { return kind_ == Kind::kUniform ? (a_ + b_) / 2 : a_; }

std::string LengthDistribution::ToString() const {
  switch (kind_) {
    case Kind::kFixed: return fmt::format("{}", a_);
    case Kind::kUniform: return fmt::format("uniform:{}:{}", a_, b_);
    case Kind::kNormal: return fmt::format("normal:{}:{}", a_, b_);
  }
  return "?";
}

}  // namespace kvserve::bench
