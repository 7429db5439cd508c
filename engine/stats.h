// Engine statistics as plain values: counters, gauges and fixed-bucket histograms, updated on
// the engine thread and published as a snapshot after each step. Only server/ turns them
// into Prometheus metrics.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cache/kv_cache_stats.h"

namespace kvserve {

// Cumulative histogram with fixed upper bounds (seconds); +Inf is implicit.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // per bucket (non-cumulative), size bounds.size() + 1
  double sum = 0;
  int64_t count = 0;

  static Histogram Latency();   // 1 ms .. 60 s, roughly logarithmic
  static Histogram Short();     // 10 us .. 1 s, roughly logarithmic
  void Observe(double value);
};

enum class RequestOutcome : int { kOk = 0, kAborted = 1, kError = 2, kRejected = 3 };
inline constexpr int kNumRequestOutcomes = 4;
inline const char* RequestOutcomeName(RequestOutcome o) {
  switch (o) {
    case RequestOutcome::kOk: return "ok";
    case RequestOutcome::kAborted: return "aborted";
    case RequestOutcome::kError: return "error";
    case RequestOutcome::kRejected: return "rejected";
  }
  return "unknown";
}

struct EngineStats {
  KvCacheStats cache;
  // Gauges.
  int running = 0;
  int waiting = 0;
  int swapped = 0;
  int chat_sessions = 0;
  double tokens_per_second = 0;  // generated tokens over the last few seconds
  double last_step_seconds = 0;
  int last_batch_tokens = 0;
  int last_batch_seqs = 0;
  bool healthy = true;           // false after a persistent fault
  // Counters.
  int64_t steps = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens computed (prefix hits excluded)
  int64_t generation_tokens_total = 0;
  int64_t preemptions_total = 0;
  int64_t forward_errors_total = 0;
  std::array<int64_t, kNumRequestOutcomes> requests_total{};
  // Structured outputs: grammars compiled (cache misses) and found in the cache, requests
  // refused because their grammar did not compile, tokens emitted without sampling because
  // the grammar allowed only one.
  int64_t grammar_compiles_total = 0;
  int64_t grammar_cache_hits_total = 0;
  int64_t grammar_compile_errors_total = 0;
  int64_t grammar_forced_tokens_total = 0;
  // What the grammar cache holds (compiled grammars; trie walks they share), and compiles
  // queued or running.
  int64_t grammar_cache_bytes = 0;
  int64_t grammar_shared_mask_bytes = 0;
  int64_t grammar_compiling = 0;
  // Histograms (seconds).
  Histogram time_to_first_token = Histogram::Latency();
  Histogram inter_token_latency = Histogram::Latency();
  Histogram request_duration = Histogram::Latency();
  Histogram step_duration = Histogram::Latency();
  Histogram grammar_compile = Histogram::Latency();  // per cache miss
  Histogram grammar_mask = Histogram::Short();       // per token mask of a structured sequence
};

}  // namespace kvserve
