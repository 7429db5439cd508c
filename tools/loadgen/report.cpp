// bench-serve summaries, markdown and JSON reports, and the read-bandwidth probe.
#include "tools/loadgen/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace kvserve::bench {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxErrorExamples = 5;

json SummaryJson(const Summary& s) {
  return json{{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90},
              {"p99", s.p99},     {"min", s.min},   {"max", s.max}};
}

std::string Row(const char* name, const Summary& s) {
  return fmt::format("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", name, s.mean, s.p50, s.p90, s.p99);
}

const char* EndpointName(Endpoint e) { return e == Endpoint::kChat ? "chat" : "completions"; }

}  // namespace

BenchSummary SummarizeRun(const BenchRun& run) {
  BenchSummary s;
  s.model = run.model;
  s.wall_seconds = run.wall_seconds;
  s.client_cpu_seconds = run.client_cpu_seconds;
  std::vector<double> ttft, itl, tpot, e2e, out_len;
  for (const RequestResult& r : run.results) {
    if (!r.ok) {
      ++s.failed;
      ++s.errors[r.error_kind];
      if (s.error_examples.size() < kMaxErrorExamples) s.error_examples.push_back(r.error_kind + ": " + r.error);
      continue;
    }
    ++s.completed;
    s.output_tokens += r.output_tokens;
    s.prompt_tokens += r.prompt_tokens;
    s.tokens_from_usage = s.tokens_from_usage && r.tokens_from_usage;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    out_len.push_back(static_cast<double>(r.output_tokens));
    for (double gap : r.itl_s) itl.push_back(gap * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
  }
  if (s.completed == 0) s.tokens_from_usage = false;
  if (s.wall_seconds > 0) {
    s.requests_per_s = s.completed / s.wall_seconds;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.wall_seconds;
    s.total_tokens_per_s = static_cast<double>(s.output_tokens + s.prompt_tokens) / s.wall_seconds;
  }
  s.ttft_ms = Summarize(std::move(ttft));
  s.itl_ms = Summarize(std::move(itl));
  s.tpot_ms = Summarize(std::move(tpot));
  s.e2e_ms = Summarize(std::move(e2e));
  s.output_len = Summarize(std::move(out_len));
  return s;
}

Roofline MeasureReadBandwidth(int threads, size_t bytes, int passes) {
  threads = std::max(1, threads);
  const size_t n = bytes / sizeof(uint64_t);
  std::vector<uint64_t> data(n);  // written here: the pages are faulted in before timing
  for (size_t i = 0; i < n; ++i) data[i] = i;
  std::vector<double> rates;
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (int pass = 0; pass < std::max(1, passes); ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
        const size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        // Eight independent sums: one dependent chain measures latency, not bandwidth.
        uint64_t a[8] = {};
        size_t i = begin;
        for (; i + 8 <= end; i += 8)
          for (int j = 0; j < 8; ++j) a[j] += data[i + j];
        for (; i < end; ++i) a[0] += data[i];
        sums[static_cast<size_t>(t)] += a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
      });
    }
    for (std::thread& w : workers) w.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(n * sizeof(uint64_t)) / seconds / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  Roofline r;
  r.bandwidth_gb_s = rates[rates.size() / 2];
  r.bandwidth_min_gb_s = rates.front();
  r.bandwidth_max_gb_s = rates.back();
  volatile uint64_t sink = 0;  // keeps the sums alive
  for (uint64_t s : sums) sink = sink + s;
  return r;
}

void ApplyRoofline(Roofline r, double bytes_per_token, BenchSummary* summary) {
  r.bytes_per_token = bytes_per_token;
  r.roofline_tok_s = bytes_per_token > 0 ? r.bandwidth_gb_s * 1e9 / bytes_per_token : 0;
  r.stream_decode_tok_s = summary->tpot_ms.mean > 0 ? 1e3 / summary->tpot_ms.mean : 0;
  r.fraction = r.roofline_tok_s > 0 ? r.stream_decode_tok_s / r.roofline_tok_s : 0;
  summary->roofline = r;
}

std::string DescribeConfig(const BenchConfig& c) {
  std::string load = c.request_rate > 0
                         ? fmt::format("Poisson arrivals at {} requests/s (at most {} in flight)", c.request_rate,
                                       c.concurrency)
                         : fmt::format("{} client{} sending one request after another", c.concurrency,
                                       c.concurrency == 1 ? "" : "s");
  std::string amount = c.num_requests > 0 ? fmt::format("{} requests", c.num_requests)
                                          : fmt::format("{} s", c.duration_seconds);
  std::string prompt = c.prompt_len ? fmt::format("prompts of {} tokens (word list)", c.prompt_len->ToString())
                                    : fmt::format("prompt \"{}\"", c.prompt);
  return fmt::format("{}; {}; {}; max_tokens {}; temperature {}; {}{}; {}", load, amount, prompt,
                     c.max_tokens.ToString(), c.temperature, c.ignore_eos ? "ignore_eos" : "stops at EOS",
                     c.stream ? ", streaming" : ", not streaming", EndpointName(c.endpoint));
}

std::string MarkdownReport(const BenchConfig& c, const BenchSummary& s) {
  std::string out = fmt::format("## bench-serve: {} (model `{}`)\n\n{}\n\n", fmt::format("http://{}:{}{}", c.url.host,
                                c.url.port, c.url.base_path), s.model, DescribeConfig(c));
  out += "| metric | value |\n|---|---|\n";
  out += fmt::format("| successful requests | {} |\n| failed requests | {} |\n", s.completed, s.failed);
  out += fmt::format("| wall time | {:.2f} s |\n", s.wall_seconds);
  out += fmt::format("| requests/s | {:.3f} |\n", s.requests_per_s);
  out += fmt::format("| output tokens/s | {:.1f} |\n", s.output_tokens_per_s);
  out += fmt::format("| total tokens/s (prompt + output) | {:.1f} |\n", s.total_tokens_per_s);
  out += fmt::format("| output tokens | {} ({}) |\n", s.output_tokens,
                     s.tokens_from_usage ? "server usage" : "counted from streamed chunks where usage was absent");
  out += fmt::format("| prompt tokens | {} |\n", s.prompt_tokens);
  out += fmt::format("| load generator CPU | {:.2f} s = {:.1f}% of one core over the run |\n", s.client_cpu_seconds,
                     s.wall_seconds > 0 ? 100 * s.client_cpu_seconds / s.wall_seconds : 0.0);
  if (s.roofline) {
    const Roofline& r = *s.roofline;
    out += fmt::format("| read bandwidth (this machine) | {:.1f} GB/s ({:.1f}-{:.1f}) |\n", r.bandwidth_gb_s,
                       r.bandwidth_min_gb_s, r.bandwidth_max_gb_s);
    out += fmt::format("| roofline (bandwidth / {:.2f} MiB per token) | {:.1f} tok/s |\n",
                       r.bytes_per_token / (1 << 20), r.roofline_tok_s);
    out += fmt::format("| per-stream decode (1 / mean TPOT) | {:.1f} tok/s = {:.0f}% of the roofline |\n",
                       r.stream_decode_tok_s, 100 * r.fraction);
  }
  out += "\n| latency (ms) | mean | p50 | p90 | p99 |\n|---|---|---|---|---|\n";
  out += Row("time to first token", s.ttft_ms);
  out += Row("inter-token (between content chunks)", s.itl_ms);
  out += Row("time per output token", s.tpot_ms);
  out += Row("end-to-end", s.e2e_ms);
  if (!s.errors.empty()) {
    out += "\n| error | count |\n|---|---|\n";
    for (const auto& [kind, n] : s.errors) out += fmt::format("| {} | {} |\n", kind, n);
    out += "\nFirst errors:\n";
    for (const std::string& e : s.error_examples) out += fmt::format("- {}\n", e);
  }
  return out;
}

json JsonReport(const BenchConfig& c, const BenchSummary& s, const BenchRun& run) {
  json config = {
      {"url", fmt::format("http://{}:{}{}", c.url.host, c.url.port, c.url.base_path)},
      {"model", s.model},
      {"endpoint", EndpointName(c.endpoint)},
      {"concurrency", c.concurrency},
      {"request_rate", c.request_rate},
      {"num_requests", c.num_requests},
      {"duration_s", c.duration_seconds},
      {"prompt", c.prompt_len ? json(nullptr) : json(c.prompt)},
      {"prompt_len_dist", c.prompt_len ? json(c.prompt_len->ToString()) : json(nullptr)},
      {"max_tokens", c.max_tokens.ToString()},
      {"temperature", c.temperature},
      {"ignore_eos", c.ignore_eos},
      {"stream", c.stream},
      {"seed", c.seed},
      {"description", DescribeConfig(c)},
  };
  if (c.prompt_len) {
    config["tokens_per_word"] = run.tokens_per_word;
    config["prompt_overhead_tokens"] = run.prompt_overhead_tokens;
  }
  json summary = {
      {"completed", s.completed},
      {"failed", s.failed},
      {"wall_s", s.wall_seconds},
      {"requests_per_s", s.requests_per_s},
      {"output_tokens_per_s", s.output_tokens_per_s},
      {"total_tokens_per_s", s.total_tokens_per_s},
      {"output_tokens", s.output_tokens},
      {"prompt_tokens", s.prompt_tokens},
      {"tokens_from_usage", s.tokens_from_usage},
      {"client_cpu_s", s.client_cpu_seconds},
      {"ttft_ms", SummaryJson(s.ttft_ms)},
      {"itl_ms", SummaryJson(s.itl_ms)},
      {"tpot_ms", SummaryJson(s.tpot_ms)},
      {"e2e_ms", SummaryJson(s.e2e_ms)},
      {"output_len", SummaryJson(s.output_len)},
  };
  if (s.roofline) {
    const Roofline& r = *s.roofline;
    summary["roofline"] = {{"bandwidth_gb_s", r.bandwidth_gb_s},       {"bandwidth_min_gb_s", r.bandwidth_min_gb_s},
                           {"bandwidth_max_gb_s", r.bandwidth_max_gb_s}, {"bytes_per_token", r.bytes_per_token},
                           {"roofline_tok_s", r.roofline_tok_s},       {"stream_decode_tok_s", r.stream_decode_tok_s},
                           {"fraction", r.fraction}};
  }
  json requests = json::array();
  for (const RequestResult& r : run.results) {
    json q = {{"ok", r.ok},
              {"start_s", r.start_s},
              {"ttft_ms", r.ttft_s * 1e3},
              {"e2e_ms", r.e2e_s * 1e3},
              {"output_tokens", r.output_tokens},
              {"prompt_tokens", r.prompt_tokens},
              {"chunks", r.chunks},
              {"max_tokens", r.max_tokens}};
    if (!r.ok) {
      q["error_kind"] = r.error_kind;
      q["error"] = r.error;
      q["http_status"] = r.http_status;
    }
    requests.push_back(std::move(q));
  }
  return json{{"config", std::move(config)},
              {"summary", std::move(summary)},
              {"errors", s.errors},
              {"error_examples", s.error_examples},
              {"requests", std::move(requests)}};
}

}  // namespace kvserve::bench
