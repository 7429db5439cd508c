// bench-serve's client threads: arrivals, one request's timing, the progress bar.
#include "tools/loadgen/runner.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace kvserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxRawBody = 4 << 20;  // bytes of a non-streamed or error body kept

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

std::vector<std::string> Headers(const BenchConfig& c) {
  std::vector<std::string> h;
  if (!c.api_key.empty()) h.push_back("Authorization: Bearer " + c.api_key);
  return h;
}

std::string ErrorKind(const Status& s) {
  const std::string& m = s.message();
  if (m.find("timed out") != std::string::npos) return "timeout";
  if (m.find("cannot connect") != std::string::npos || m.find("cannot resolve") != std::string::npos) return "connect";
  return "broken_stream";
}

// Sends one request on `conn` and times it. `run_start` anchors start_s.
RequestResult SendOne(HttpConnection& conn, const BenchConfig& c, const RequestSpec& spec, Clock::time_point run_start) {
  RequestResult r;
  r.max_tokens = spec.max_tokens;
  const std::string body = BuildRequestBody(spec);

  SseParser sse;
  std::string raw;  // error bodies and non-streamed replies
  bool saw_done = false, finished = false, malformed = false;
  std::optional<std::string> stream_error;
  std::optional<int64_t> usage_out, usage_prompt;
  std::optional<Clock::time_point> first, last;
  Clock::time_point now;
  auto on_event = [&](std::string_view data) {
    const EventInfo e = ParseEvent(data);
    if (e.done) {
      saw_done = true;
      return;
    }
    if (e.malformed) malformed = true;
    if (e.error && !stream_error) stream_error = *e.error;
    if (e.finished) finished = true;
    if (e.completion_tokens) usage_out = e.completion_tokens;
    if (e.prompt_tokens) usage_prompt = e.prompt_tokens;
    if (e.content_pieces > 0) {
      if (!first) {
        first = now;
      } else {
        r.itl_s.push_back(Seconds(now - *last));
      }
      last = now;
      ++r.chunks;
    }
  };
  auto on_body = [&](int status, std::string_view bytes) {
    now = Clock::now();
    if (status == 200 && c.stream) {
      sse.Feed(bytes, on_event);
    } else if (raw.size() < kMaxRawBody) {
      raw.append(bytes.substr(0, kMaxRawBody - raw.size()));
    }
  };

  StatusOr<HttpConnection::Response> resp = conn.Request("POST", EndpointPath(spec.endpoint), body, Headers(c), on_body);
  const Clock::time_point end = Clock::now();
  if (!resp.ok()) {
    r.error_kind = ErrorKind(resp.status());
    r.error = resp.status().message();
    return r;
  }
  r.http_status = resp->status;
  r.start_s = Seconds(resp->sent - run_start);
  r.e2e_s = Seconds(end - resp->sent);
  if (resp->status != 200) {
    r.error_kind = fmt::format("http_{}", resp->status);
    r.error = ErrorMessage(raw);
    return r;
  }
  if (!c.stream) {
    now = end;
    on_event(raw);
    finished = finished || !stream_error;
  }
  if (stream_error) {
    r.error_kind = "stream_error";
    r.error = *stream_error;
    return r;
  }
  if (malformed) {
    r.error_kind = "malformed_event";
    r.error = "an event (or the reply) is not JSON";
    return r;
  }
  if (!saw_done && !finished) {
    r.error_kind = "broken_stream";
    r.error = "the stream ended without [DONE] or a finish_reason";
    return r;
  }
  r.ok = true;
  r.ttft_s = first ? Seconds(*first - resp->sent) : r.e2e_s;
  r.tokens_from_usage = usage_out.has_value();
  r.output_tokens = usage_out ? *usage_out : r.chunks;
  r.prompt_tokens = usage_prompt.value_or(0);
  return r;
}

// Polls GET /v1/models until it answers 200 (or the deadline passes); returns the body.
StatusOr<std::string> GetModels(const BenchConfig& c) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(c.wait_ready_seconds));
  Status last;
  for (;;) {
    HttpConnection conn(c.url, std::min(c.timeout_seconds, 30.0));
    std::string body;
    StatusOr<HttpConnection::Response> r =
        conn.Request("GET", "/v1/models", "", Headers(c), [&](int, std::string_view b) { body.append(b); });
    if (r.ok() && r->status == 200) return body;
    last = r.ok() ? UnavailableError(fmt::format("GET /v1/models: HTTP {}: {}", r->status, ErrorMessage(body)))
                  : r.status();
    if (Clock::now() >= deadline) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Prompt lengths in tokens -> word counts: two non-streamed requests of 64 and 128 words
// give tokens per word and the fixed overhead (BOS, chat template) from usage.prompt_tokens.
void Calibrate(const BenchConfig& c, const std::string& model, BenchRun* run) {
  run->tokens_per_word = 1;
  run->prompt_overhead_tokens = 0;
  HttpConnection conn(c.url, c.timeout_seconds);
  std::mt19937_64 rng(c.seed ^ 0x5eed);
  int64_t tokens[2] = {0, 0};
  constexpr int kWordsPerProbe[2] = {64, 128};
  for (int i = 0; i < 2; ++i) {
    RequestSpec spec;
    spec.endpoint = c.endpoint;
    spec.model = model;
    spec.prompt = WordPrompt(kWordsPerProbe[i], rng);
    spec.max_tokens = 1;
    spec.ignore_eos = false;
    spec.stream = false;
    spec.extra_body = &c.extra_body;
    std::string body;
    StatusOr<HttpConnection::Response> r = conn.Request("POST", EndpointPath(c.endpoint), BuildRequestBody(spec),
                                                        Headers(c), [&](int, std::string_view b) { body.append(b); });
    const EventInfo e = r.ok() && r->status == 200 ? ParseEvent(body) : EventInfo{};
    if (!e.prompt_tokens) {
      std::fprintf(stderr, "bench-serve: the server reports no usage.prompt_tokens; assuming one token per word\n");
      return;
    }
    tokens[i] = *e.prompt_tokens;
  }
  const double per_word = static_cast<double>(tokens[1] - tokens[0]) / (kWordsPerProbe[1] - kWordsPerProbe[0]);
  if (per_word <= 0) return;
  run->tokens_per_word = per_word;
  run->prompt_overhead_tokens = std::max(0.0, static_cast<double>(tokens[0]) - per_word * kWordsPerProbe[0]);
}

class LoadGenerator {
 public:
  LoadGenerator(const BenchConfig& c, BenchRun* run)
      : c_(c), run_(run), arrivals_(c.request_rate, c.seed), rng_(c.seed) {}

  void Run() {
    const int clients = std::max(1, c_.concurrency);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(clients));
    for (int i = 0; i < clients; ++i) threads.emplace_back([this] { Worker(); });
    std::thread progress;
    {
      std::lock_guard<std::mutex> lock(mu_);
      start_ = Clock::now();
      go_ = true;
    }
    cv_.notify_all();
    if (c_.progress) progress = std::thread([this] { Progress(); });
    for (std::thread& t : threads) t.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (progress.joinable()) progress.join();
    run_->wall_seconds = Seconds(last_end_ - start_);
  }

 private:
  // The next request to send; false when the run is over.
  bool Next(RequestSpec* spec, double* arrival_s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (c_.num_requests > 0 && next_ >= c_.num_requests) return false;
    *arrival_s = arrivals_.Next();
    if (c_.num_requests == 0) {
      const double deadline = c_.duration_seconds;
      if (*arrival_s >= deadline || Seconds(Clock::now() - start_) >= deadline) return false;
    }
    ++next_;
    spec->endpoint = c_.endpoint;
    spec->model = run_->model;
    spec->temperature = c_.temperature;
    spec->ignore_eos = c_.ignore_eos;
    spec->stream = c_.stream;
    spec->include_usage = c_.include_usage;
    spec->extra_body = &c_.extra_body;
    spec->variant = c_.body_variants.empty() ? nullptr
                                             : &c_.body_variants[static_cast<size_t>(next_ - 1) % c_.body_variants.size()];
    spec->max_tokens = c_.max_tokens.Sample(rng_);
    if (c_.prompt_len) {
      const int tokens = c_.prompt_len->Sample(rng_);
      const double words = (tokens - run_->prompt_overhead_tokens) / run_->tokens_per_word;
      spec->prompt = WordPrompt(std::max(1, static_cast<int>(std::lround(words))), rng_);
    } else {
      spec->prompt = c_.prompt;
    }
    return true;
  }

  void Worker() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return go_; });
    }
    HttpConnection conn(c_.url, c_.timeout_seconds);
    RequestSpec spec;
    double arrival_s = 0;
    while (Next(&spec, &arrival_s)) {
      if (c_.request_rate > 0) {
        std::this_thread::sleep_until(start_ + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(arrival_s)));
      }
      RequestResult r = SendOne(conn, c_, spec, start_);
      const Clock::time_point end = Clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      last_end_ = std::max(last_end_, end);
      if (r.ok) {
        tokens_ += r.output_tokens;
      } else {
        ++failed_;
      }
      run_->results.push_back(std::move(r));
    }
  }

  void Progress() {
    constexpr int kWidth = 30;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      const bool last = finished_;
      const double elapsed = Seconds(Clock::now() - start_);
      const size_t done = run_->results.size();
      const double fraction =
          c_.num_requests > 0 ? static_cast<double>(done) / c_.num_requests
                              : std::min(1.0, elapsed / std::max(1e-9, c_.duration_seconds));
      const int filled = static_cast<int>(std::lround(fraction * kWidth));
      const std::string total = c_.num_requests > 0 ? fmt::format("/{}", c_.num_requests) : "";
      std::fprintf(stderr, "\r[%s%s] %zu%s requests, %d errors, %.0f tok/s, %.1f s ",
                   std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), done, total.c_str(), failed_,
                   elapsed > 0 ? static_cast<double>(tokens_) / elapsed : 0.0, elapsed);
      if (last) break;
      cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return finished_; });
    }
    std::fprintf(stderr, "\n");
  }

  const BenchConfig& c_;
  BenchRun* run_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool go_ = false;
  bool finished_ = false;
  Clock::time_point start_;
  Clock::time_point last_end_;
  PoissonArrivals arrivals_;
  std::mt19937_64 rng_;
  int next_ = 0;
  int failed_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace

StatusOr<BenchRun> RunBenchmark(const BenchConfig& config) {
  BenchRun run;
  run.model = config.model;
  if (run.model.empty() || config.wait_ready_seconds > 0) {
    StatusOr<std::string> models = GetModels(config);
    if (!models.ok()) return UnavailableError(fmt::format("{}: {}", "server not reachable", models.status().message()));
    if (run.model.empty()) {
      StatusOr<std::string> id = FirstModelId(*models);
      if (!id.ok()) return id.status();
      run.model = *id;
    }
  }
  if (config.prompt_len) Calibrate(config, run.model, &run);
  if (config.warmup_requests > 0) {
    HttpConnection conn(config.url, config.timeout_seconds);
    RequestSpec spec;
    spec.endpoint = config.endpoint;
    spec.model = run.model;
    spec.prompt = config.prompt;
    spec.max_tokens = static_cast<int>(std::lround(config.max_tokens.Mean()));
    spec.temperature = config.temperature;
    spec.ignore_eos = config.ignore_eos;
    spec.stream = config.stream;
    spec.include_usage = config.include_usage;
    spec.extra_body = &config.extra_body;
    for (int i = 0; i < config.warmup_requests; ++i) {
      const RequestResult r = SendOne(conn, config, spec, Clock::now());
      if (!r.ok) return UnavailableError(fmt::format("warm-up request failed ({}): {}", r.error_kind, r.error));
    }
  }
  const double cpu_before = ProcessCpuSeconds();
  LoadGenerator(config, &run).Run();
  run.client_cpu_seconds = ProcessCpuSeconds() - cpu_before;
  return run;
}

}  // namespace kvserve::bench
