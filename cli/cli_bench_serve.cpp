// `kvserve bench-serve`: a load generator for any OpenAI-compatible server (kvserve,
// llama.cpp's server, vLLM). Fixed concurrency or Poisson arrivals, a fixed prompt or prompt
// lengths from a distribution, streaming by default; prints a markdown table on stdout
// (throughput, TTFT, inter-token, time per output token, end-to-end: mean/p50/p90/p99) and
// writes JSON with --output-json. See tools/loadgen/runner.h for what is timed.
//
//   kvserve bench-serve --url http://127.0.0.1:8080 --concurrency 16 --num-requests 64
//
// Exit codes: 0 when at least one request succeeded (failures are in the report), 1 when the
// server could not be reached or every request failed, 2 for bad options.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "tools/loadgen/report.h"
#include "tools/loadgen/runner.h"
#include "cli/cli.h"

namespace kvserve::cli {
namespace bench_serve_command {

constexpr char kCommand[] = "bench-serve";

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string endpoint = "completions";
  int concurrency = 1;
  double request_rate = 0;
  int num_requests = 0;
  double duration = 0;
  std::string prompt = bench::kDefaultPrompt;
  std::string prompt_len_dist;
  int max_tokens = 128;
  std::string max_tokens_dist;
  std::string extra_body;
  std::string extra_bodies;
  std::string output_json;
  double weight_mib_per_token = 0;
  double bandwidth_gb_s = 0;
  bool measure_bandwidth = false;
  bench::BenchConfig config;
  const CLI::Option* concurrency_option = nullptr;
  const CLI::Option* num_requests_option = nullptr;
  const CLI::Option* duration_option = nullptr;
  const CLI::Option* prompt_option = nullptr;
  const CLI::Option* max_tokens_option = nullptr;
};

int RunBenchServe(BenchServeOptions& o) {
  bench::BenchConfig& c = o.config;
  if (o.measure_bandwidth) {
    const bench::Roofline bw = bench::MeasureReadBandwidth(/*threads=*/2, size_t{1} << 30, /*passes=*/9);
    std::printf("read bandwidth (2 threads summing 1 GiB, median of 9 passes): %.1f GB/s (passes %.1f-%.1f)\n",
                bw.bandwidth_gb_s, bw.bandwidth_min_gb_s, bw.bandwidth_max_gb_s);
    return kExitOk;
  }
  StatusOr<bench::Url> url = bench::ParseUrl(o.url);
  if (!url.ok()) return ReportError(kCommand, url.status());
  c.url = *url;
  c.endpoint = o.endpoint == "chat" ? bench::Endpoint::kChat : bench::Endpoint::kCompletions;

  if (o.num_requests_option->count() > 0 && o.duration_option->count() > 0) {
    return ReportError(kCommand, "give --num-requests or --duration, not both", kExitUsageError);
  }
  c.request_rate = o.request_rate;
  c.concurrency = o.concurrency;
  if (c.request_rate > 0 && o.concurrency_option->count() == 0) c.concurrency = 256;  // in-flight cap
  c.duration_seconds = o.duration;
  c.num_requests = o.duration_option->count() > 0 ? 0
                   : o.num_requests_option->count() > 0 ? o.num_requests
                                                        : std::max(16, 4 * c.concurrency);

  if (!o.prompt_len_dist.empty()) {
    if (o.prompt_option->count() > 0) {
      return ReportError(kCommand, "give --prompt or --prompt-len-dist, not both", kExitUsageError);
    }
    StatusOr<bench::LengthDistribution> d = bench::LengthDistribution::Parse(o.prompt_len_dist);
    if (!d.ok()) return ReportError(kCommand, "--prompt-len-dist: " + d.status().message(), kExitUsageError);
    c.prompt_len = *d;
  }
  c.prompt = o.prompt;
  if (!o.max_tokens_dist.empty()) {
    if (o.max_tokens_option->count() > 0) {
      return ReportError(kCommand, "give --max-tokens or --max-tokens-dist, not both", kExitUsageError);
    }
    StatusOr<bench::LengthDistribution> d = bench::LengthDistribution::Parse(o.max_tokens_dist);
    if (!d.ok()) return ReportError(kCommand, "--max-tokens-dist: " + d.status().message(), kExitUsageError);
    c.max_tokens = *d;
  } else {
    c.max_tokens = bench::LengthDistribution::Fixed(o.max_tokens);
  }
  if (!o.extra_body.empty()) {
    c.extra_body = nlohmann::json::parse(o.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!c.extra_body.is_object()) return ReportError(kCommand, "--extra-body must be a JSON object", kExitUsageError);
  }
  if (!o.extra_bodies.empty()) {
    std::ifstream in(o.extra_bodies);
    if (!in) return ReportError(kCommand, "cannot read " + o.extra_bodies, kExitUsageError);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) return ReportError(kCommand, "--extra-bodies: each line must be a JSON object", kExitUsageError);
      c.body_variants.push_back(std::move(j));
    }
    if (c.body_variants.empty()) return ReportError(kCommand, "--extra-bodies: no object in " + o.extra_bodies, kExitUsageError);
  }

  // The bandwidth probe runs before the load, while the server is idle.
  std::optional<bench::Roofline> bandwidth;
  if (o.weight_mib_per_token > 0) {
    if (o.bandwidth_gb_s > 0) {
      bandwidth = bench::Roofline{};
      bandwidth->bandwidth_gb_s = bandwidth->bandwidth_min_gb_s = bandwidth->bandwidth_max_gb_s = o.bandwidth_gb_s;
    } else {
      bandwidth = bench::MeasureReadBandwidth(/*threads=*/2, size_t{1} << 30, /*passes=*/9);
    }
  }

  StatusOr<bench::BenchRun> run = bench::RunBenchmark(c);
  if (!run.ok()) return ReportError(kCommand, run.status().message(), kExitRuntimeError);
  bench::BenchSummary summary = bench::SummarizeRun(*run);
  if (bandwidth) bench::ApplyRoofline(*bandwidth, o.weight_mib_per_token * (1 << 20), &summary);

  std::fputs(bench::MarkdownReport(c, summary).c_str(), stdout);
  std::fflush(stdout);
  if (!o.output_json.empty()) {
    std::ofstream out(o.output_json);
    out << bench::JsonReport(c, summary, *run).dump(2) << "\n";
    if (!out) return ReportError(kCommand, fmt::format("cannot write --output-json '{}'", o.output_json),
                                 kExitRuntimeError);
  }
  if (summary.completed == 0) {
    return ReportError(kCommand, fmt::format("all {} requests failed", summary.failed), kExitRuntimeError);
  }
  return kExitOk;
}

}  // namespace bench_serve_command

void RegisterBenchServeCommand(CommandRegistry& registry) {
  using namespace bench_serve_command;
  auto o = std::make_shared<BenchServeOptions>();
  bench::BenchConfig& c = o->config;
  c.progress = isatty(STDERR_FILENO) != 0;
  CLI::App* sub = registry.Add(kCommand, "Load-test an OpenAI-compatible server (kvserve, llama.cpp, vLLM): "
                                         "throughput, TTFT, inter-token and end-to-end latency",
                               [o] { return RunBenchServe(*o); });
  sub->add_option("--url", o->url, "Server base URL (http://host:port, or https:// trusting the CAs of "
                                   "OpenSSL's store or SSL_CERT_FILE)");
  sub->add_option("--model", c.model, "Model id to request (default: the first of GET /v1/models)");
  sub->add_option("--endpoint", o->endpoint, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->check(CLI::IsMember({"completions", "chat"}));
  o->concurrency_option =
      sub->add_option("-c,--concurrency", o->concurrency,
                      "Clients, each sending its requests one after another (with --request-rate: the most "
                      "requests in flight, default 256)")
          ->check(CLI::Range(1, 4096));
  sub->add_option("--request-rate", o->request_rate, "Poisson arrivals at this many requests/s instead of fixed "
                                                     "concurrency")
      ->check(CLI::Range(0.0, 1e6));
  o->num_requests_option = sub->add_option("-n,--num-requests", o->num_requests,
                                           "Requests to send (default: 4 per client, at least 16)")
                               ->check(CLI::Range(1, 1 << 24));
  o->duration_option = sub->add_option("--duration", o->duration, "Seconds to keep sending (instead of "
                                                                  "--num-requests); requests in flight finish")
                           ->check(CLI::Range(0.001, 1e7));
  o->prompt_option = sub->add_option("--prompt", o->prompt, "The prompt every request sends");
  sub->add_option("--prompt-len-dist", o->prompt_len_dist,
                  "Prompt lengths in tokens: N, uniform:A:B or normal:MEAN:STD; prompts are drawn from a word "
                  "list, calibrated with the server's usage.prompt_tokens");
  o->max_tokens_option = sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate per request")
                             ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-tokens-dist", o->max_tokens_dist, "Output lengths: N, uniform:A:B or normal:MEAN:STD");
  sub->add_flag("--ignore-eos,!--no-ignore-eos", c.ignore_eos,
                "Send \"ignore_eos\": true so every request generates max_tokens (kvserve, llama.cpp, vLLM)");
  sub->add_option("--temperature", c.temperature, "Sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 10.0));
  sub->add_flag("--stream,!--no-stream", c.stream, "Stream responses (SSE); without streaming TTFT = end-to-end");
  sub->add_flag("--include-usage,!--no-include-usage", c.include_usage,
                "Ask for usage in the stream (stream_options.include_usage); tokens are counted from it");
  sub->add_option("--api-key", c.api_key, "Sent as 'Authorization: Bearer <key>'");
  sub->add_option("--extra-body", o->extra_body, "A JSON object merged into every request body");
  sub->add_option("--extra-bodies", o->extra_bodies,
                  "A file of JSON objects, one per line: request k also merges line k mod N (e.g. a different "
                  "response_format per request)")
      ->check(CLI::ExistingFile);
  sub->add_option("--seed", c.seed, "Seed of the arrival times and generated prompts");
  sub->add_option("--timeout", c.timeout_seconds, "Seconds to wait for a connection or the next bytes")
      ->check(CLI::Range(0.1, 86400.0));
  sub->add_option("--warmup", c.warmup_requests, "Requests sent one by one before the measurement")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--wait-ready", c.wait_ready_seconds,
                  "Seconds to wait for GET /v1/models to answer 200 before starting (a server still loading)")
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_flag("--progress,!--no-progress", c.progress, "Progress bar on stderr (default: when stderr is a terminal)");
  sub->add_option("--output-json", o->output_json, "Write the summary and every request's timings as JSON");
  sub->add_option("--weight-mib-per-token", o->weight_mib_per_token,
                  "Weight MiB one decode step reads: measures this machine's read bandwidth (2 threads, 1 GiB) "
                  "before the load and reports per-stream decode speed against the bandwidth roofline")
      ->check(CLI::Range(0.0, 1e9));
  sub->add_option("--bandwidth-gb-s", o->bandwidth_gb_s, "Use this read bandwidth for the roofline instead of "
                                                         "measuring it")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_flag("--measure-bandwidth", o->measure_bandwidth,
                "Only measure this machine's read bandwidth (as for the roofline), print it and exit");
}

}  // namespace kvserve::cli
