// The load generator of `kvserve bench-serve`: client threads that send OpenAI requests to a
// server and time every response.
//
// Two modes share one loop. Fixed concurrency: `concurrency` clients, each sending its
// requests one after another. Request rate: arrivals of a Poisson process; `concurrency`
// then caps the requests in flight (an arrival waits for a free client and is sent late).
// The run ends after `num_requests` requests, or once `duration_seconds` have passed (requests
// in flight then finish and count).
//
// Timing: a request's clock starts just before its first byte is written; TTFT ends when the
// first chunk with content arrives; inter-token latencies are the gaps between successive
// content chunks of one request; end-to-end ends with the response's last byte. Wall time
// runs from the start to the last response. Tokens: the server's usage
// (stream_options.include_usage) when it sends one, else the number of content chunks.
// Failed requests (connection errors, non-200, error events, streams that end without
// [DONE] or a finish_reason) are kept apart and never count tokens.
//
// RunBenchmark is called from one thread; it starts and joins its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/http_client/http_client.h"
#include "tools/loadgen/openai_requests.h"
#include "tools/loadgen/stats.h"

namespace kvserve::bench {

inline constexpr char kDefaultPrompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside.";

struct BenchConfig {
  Url url;
  std::string model;           // empty: the first id of /v1/models
  Endpoint endpoint = Endpoint::kCompletions;
  int concurrency = 1;         // clients; with request_rate: the most requests in flight
  double request_rate = 0;     // > 0: Poisson arrivals (requests/s)
  int num_requests = 0;        // 0: run for duration_seconds
  double duration_seconds = 0;
  std::string prompt = kDefaultPrompt;
  std::optional<LengthDistribution> prompt_len;  // tokens: prompts drawn from a word list
  LengthDistribution max_tokens = LengthDistribution::Fixed(128);
  double temperature = 0;
  bool ignore_eos = true;
  bool stream = true;
  bool include_usage = true;
  std::string api_key;
  nlohmann::json extra_body;   // merged into every request body (an object), or null
  // Request k also merges body_variants[k % size] (e.g. a different JSON Schema per request).
  std::vector<nlohmann::json> body_variants;
  uint64_t seed = 0;
  double timeout_seconds = 600;
  int warmup_requests = 0;     // sent one by one before the measurement, not counted
  double wait_ready_seconds = 0;  // poll /v1/models this long for the server to come up
  bool progress = false;       // a progress bar on stderr
};

struct RequestResult {
  bool ok = false;
  std::string error_kind;  // "connect", "timeout", "broken_stream", "http_503", "stream_error", ...
  std::string error;
  int http_status = 0;
  double start_s = 0;      // when it was sent, seconds after the run started
  double ttft_s = 0;
  double e2e_s = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;  // from usage; 0 when the server sent none
  bool tokens_from_usage = false;
  int chunks = 0;             // streamed events with content
  int max_tokens = 0;
  std::vector<double> itl_s;  // gaps between successive content chunks
};

struct BenchRun {
  std::string model;
  double wall_seconds = 0;
  std::vector<RequestResult> results;  // in completion order
  // --prompt-len-dist: the calibration that turned token lengths into word counts.
  double tokens_per_word = 0;
  double prompt_overhead_tokens = 0;
  // CPU the load generator itself used during the run (user + system, all its threads), so a
  // report can show it did not take the server's cores.
  double client_cpu_seconds = 0;
};

// Runs the benchmark. Errors: the server is unreachable or has no model (before any load).
[[nodiscard]] StatusOr<BenchRun> RunBenchmark(const BenchConfig& config);

}  // namespace kvserve::bench
