// `kvserve soak`: a long mixed workload against a real `kvserve serve` over HTTP, started here
// (this binary, on a free loopback port, with --enable-debug-endpoints) or given with --url,
// and the checks that a long-running server must pass at the end:
//
//   * no 5xx except injected faults (--fault-every), every invalid request refused with a 4xx,
//     every complete response well formed, greedy repeats of the same request identical;
//   * zero used KV blocks once the clients are gone and the chat sessions expired (only
//     cached or pinned prefix blocks remain): /metrics kvserve_kv_cache_blocks{state="used"}
//     and GET /debug/cache, which also runs KvCacheManager::VerifyIntegrity on the engine thread;
//   * resident memory (VmRSS of the server) of the last quarter of the requests within 5 % of
//     the second quarter's (mean of samples taken every 25 ms).
//
// The workload (tools/soak/soak_workload.h, seeded by --seed): completions and chat, streamed or
// not, chat sessions, random valid parameters, --invalid-fraction invalid requests and
// --disconnect-fraction clients that go away at a random point.
//
// Prints a report (also to --report FILE, Markdown) and exits 0 when every check passed, 1
// otherwise, 2 on usage errors.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/cli.h"
#include "tools/soak/soak_client.h"
#include "tools/soak/soak_workload.h"

namespace kvserve::cli {
namespace soak_command {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr char kCommand[] = "soak";

struct SoakOptions {
  std::string url;  // empty: start a server
  int server_pid = 0;
  std::string model = "synthetic:tiny";
  std::string model_id;  // empty: as the server derives it
  int requests = 500;
  int concurrency = 8;
  double disconnect_fraction = 0.3;
  double invalid_fraction = 0.05;
  uint64_t seed = 1;
  int max_tokens = 64;
  int threads = 1;
  double session_ttl = 3;
  int fault_every = 0;
  std::string api_key;
  std::vector<std::string> serve_args;
  std::string report;
  std::string server_log = "soak-server.log";
  double rss_growth_limit = 5.0;
};

// Samples the server's VmRSS every 25 ms against the number of completed requests.
class RssSampler {
 public:
  RssSampler(pid_t pid, const soak::Workload* soak) : pid_(pid) {
    if (pid_ <= 0) return;
    thread_ = std::thread([this, soak] {
      while (!stop_.load()) {
        const int64_t kib = soak::ResidentKib(pid_);
        if (kib > 0) {
          std::lock_guard<std::mutex> lock(mu_);
          samples_.emplace_back(soak->completed(), kib);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    });
  }
  ~RssSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Mean RSS (KiB) of the samples taken while completed requests were in [lo, hi).
  double Mean(int lo, int hi) const {
    double sum = 0;
    int n = 0;
    for (const auto& [done, kib] : samples_) {
      if (done >= lo && done < hi) sum += static_cast<double>(kib), ++n;
    }
    return n > 0 ? sum / n : 0;
  }
  int64_t Peak() const {
    int64_t peak = 0;
    for (const auto& s : samples_) peak = std::max(peak, s.second);
    return peak;
  }
  size_t count() const { return samples_.size(); }

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<int, int64_t>> samples_;
  std::thread thread_;
};

struct Check {
  std::string name;
  std::string value;
  std::string bound;
  bool pass;
};

// Polls `fn` every 100 ms until it returns true or `seconds` pass.
template <typename Fn>
bool WaitFor(double seconds, Fn fn) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (fn()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int RunSoak(const SoakOptions& o, const std::string& command_line) {
  std::string host = "127.0.0.1";
  int port = 0;
  soak::SoakServerProcess server;
  pid_t pid = o.server_pid;
  std::string model_id = o.model_id;
  if (o.url.empty()) {
    std::vector<std::string> args = {"--model", o.model, "--host", host, "--http-port", "0", "--grpc-port", "-1",
                                     "--threads", std::to_string(o.threads), "--enable-debug-endpoints",
                                     "--session-ttl", fmt::format("{}", o.session_ttl), "--log-level", "warn"};
    if (!o.api_key.empty()) args.insert(args.end(), {"--api-key", o.api_key});
    if (o.fault_every > 0) {
      std::string spec;
      for (int64_t pass = o.fault_every; pass < 2000000; pass += o.fault_every) spec += fmt::format("{},", pass);
      spec.pop_back();
      args.push_back("--inject-forward-faults=" + spec);
    }
    args.insert(args.end(), o.serve_args.begin(), o.serve_args.end());
    std::string error;
    if (!server.Start(args, o.server_log, 120, &error)) return ReportError(kCommand, error, kExitRuntimeError);
    port = server.port();
    pid = server.pid();
  } else {
    // http://host:port
    std::string rest = o.url.substr(o.url.find("://") == std::string::npos ? 0 : o.url.find("://") + 3);
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return ReportError(kCommand, "--url must be http://host:port", kExitUsageError);
    host = rest.substr(0, colon);
    port = std::atoi(rest.c_str() + colon + 1);
  }
  if (!WaitFor(120, [&] {
        auto r = soak::Fetch(host, port, "GET", "/ready", "", o.api_key);
        return r && r->status == 200;
      })) {
    return ReportError(kCommand, "the server did not become ready", kExitRuntimeError);
  }
  if (model_id.empty()) {
    auto models = soak::Fetch(host, port, "GET", "/v1/models", "", o.api_key);
    const json j = models ? json::parse(models->body, nullptr, false) : json();
    if (j.is_discarded() || !j.contains("data")) return ReportError(kCommand, "GET /v1/models failed", 1);
    model_id = j["data"][0]["id"].get<std::string>();
  }
  auto metric = [&](const char* sample) -> std::optional<double> {
    auto r = soak::Fetch(host, port, "GET", "/metrics", "", o.api_key);
    return r && r->status == 200 ? soak::MetricValue(r->body, sample) : std::nullopt;
  };
  const double tokens_before = metric("kvserve_generation_tokens_total").value_or(0);
  const double preempt_before = metric("kvserve_preemptions_total").value_or(0);

  std::fprintf(stderr, "kvserve soak: %d requests, %d clients, against http://%s:%d (model %s)\n", o.requests,
               o.concurrency, host.c_str(), port, model_id.c_str());
  soak::WorkloadOptions wo;
  wo.requests = o.requests;
  wo.concurrency = o.concurrency;
  wo.disconnect_fraction = o.disconnect_fraction;
  wo.invalid_fraction = o.invalid_fraction;
  wo.seed = o.seed;
  wo.max_tokens = o.max_tokens;
  wo.faults_injected = o.fault_every > 0;
  wo.api_key = o.api_key;
  soak::Workload soak(wo, host, port, model_id);
  RssSampler rss(pid, &soak);
  const auto start = Clock::now();
  std::thread progress([&] {
    int last = -1;
    while (soak.completed() < o.requests) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      const int done = soak.completed();
      if (done / std::max(1, o.requests / 10) != last) {
        last = done / std::max(1, o.requests / 10);
        std::fprintf(stderr, "  %d/%d requests\n", done, o.requests);
      }
    }
  });
  soak.Run();
  progress.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rss.Stop();

  // Settle: nothing running or waiting, chat sessions expired.
  const bool idle = WaitFor(60, [&] {
    return metric("kvserve_requests{state=\"running\"}").value_or(-1) == 0 &&
           metric("kvserve_requests{state=\"waiting\"}").value_or(-1) == 0;
  });
  const bool sessions_gone = WaitFor(o.session_ttl * 3 + 10, [&] { return metric("kvserve_chat_sessions") == 0.0; });
  const double used = metric("kvserve_kv_cache_blocks{state=\"used\"}").value_or(-1);
  const double cached = metric("kvserve_kv_cache_blocks{state=\"cached\"}").value_or(-1);
  const double pinned = metric("kvserve_kv_cache_blocks{state=\"pinned\"}").value_or(-1);
  // Blocks of the compaction region (--kv-compact-dtype) still held; 0 without one.
  const double compact_used = metric("kvserve_kv_compact_blocks{state=\"used\"}").value_or(-1);
  const double aborted = metric("kvserve_requests_total{status=\"aborted\"}").value_or(-1);
  const double tokens = metric("kvserve_generation_tokens_total").value_or(0) - tokens_before;
  const double preemptions = metric("kvserve_preemptions_total").value_or(0) - preempt_before;
  auto debug = soak::Fetch(host, port, "GET", "/debug/cache", "", o.api_key);
  const json dbg = debug ? json::parse(debug->body, nullptr, false) : json();
  const bool integrity = debug && debug->status == 200 && !dbg.is_discarded() && dbg.value("integrity", "") == "ok";
  const std::string integrity_text =
      !debug ? "no answer"
             : dbg.is_discarded() ? fmt::format("HTTP {}", debug->status)
                                  : fmt::format("{} (HTTP {}{}{})", dbg.value("integrity", "?"), debug->status,
                                                dbg.value("message", "").empty() ? "" : ": ",
                                                dbg.value("message", ""));
  int server_exit = 0;
  if (o.url.empty()) server_exit = server.Stop(60);

  soak::Figures& f = soak.figures();
  using soak::Outcome;
  const int n = o.requests;
  const double q2 = rss.Mean(n / 4, n / 2), q4 = rss.Mean(3 * n / 4, n + 1);
  const double growth = q2 > 0 ? (q4 - q2) / q2 * 100 : 0;
  int64_t five_xx = 0;
  for (const auto& [status, count] : f.statuses) five_xx += status >= 500 ? count : 0;
  const int64_t injected = f.outcomes[Outcome::kInjectedFault];

  std::vector<Check> checks;
  checks.push_back({"requests completed", fmt::format("{} in {:.1f} s ({:.1f}/s)", soak.completed(), seconds,
                                                      soak.completed() / seconds),
                    fmt::format("= {}", n), soak.completed() == n});
  checks.push_back({"unexpected outcomes (5xx, malformed, wrong status)",
                    std::to_string(f.outcomes[Outcome::kUnexpected]), "0", f.outcomes[Outcome::kUnexpected] == 0});
  checks.push_back({"5xx responses (of them injected faults)", fmt::format("{} ({})", five_xx, f.injected_5xx),
                    "only injected", five_xx == f.injected_5xx});
  checks.push_back({"greedy repeats differing", fmt::format("{} of {}", f.greedy_mismatches, f.greedy_checks), "0",
                    f.greedy_mismatches == 0});
  checks.push_back({"server idle after the run", idle ? "yes" : "no", "yes", idle});
  checks.push_back({"chat sessions left after TTL", sessions_gone ? "0" : "some", "0", sessions_gone});
  checks.push_back({"KV blocks used at the end", fmt::format("{:.0f} (cached {:.0f}, pinned {:.0f}, compacted {:.0f})",
                                                             used, cached, pinned, compact_used),
                    "0", used == 0 && compact_used == 0});
  checks.push_back({"VerifyIntegrity (GET /debug/cache)", integrity_text, "ok", integrity});
  if (pid > 0) {
    checks.push_back({"RSS growth, mean of 2nd quarter -> last quarter",
                      fmt::format("{:+.2f} % ({:.1f} -> {:.1f} MiB; peak {:.1f} MiB; {} samples)", growth, q2 / 1024,
                                  q4 / 1024, static_cast<double>(rss.Peak()) / 1024, rss.count()),
                      fmt::format("< {:.0f} %", o.rss_growth_limit), q2 > 0 && growth < o.rss_growth_limit});
  }
  if (o.url.empty()) checks.push_back({"server exit after SIGTERM", std::to_string(server_exit), "0", server_exit == 0});

  std::string report = "# kvserve soak report\n\n";
  report += fmt::format("Command: `{}`\n\n", command_line);
  report += fmt::format("Server: {} (model `{}`), {} clients, seed {}.\n\n",
                        o.url.empty() ? "started by the soak" : o.url, model_id, o.concurrency, o.seed);
  report += "| check | value | bound | result |\n|---|---|---|---|\n";
  bool all = true;
  for (const Check& c : checks) {
    report += fmt::format("| {} | {} | {} | {} |\n", c.name, c.value, c.bound, c.pass ? "pass" : "FAIL");
    all = all && c.pass;
  }
  report += "\n| workload | count |\n|---|---|\n";
  report += fmt::format("| complete and correct (200) | {} |\n", f.outcomes[Outcome::kOk]);
  report += fmt::format("| invalid, refused with 4xx as expected | {} (of {} sent) |\n",
                        f.outcomes[Outcome::kRejectedAsExpected], f.invalid);
  report += fmt::format("| client disconnected on purpose | {} (planned {}) |\n", f.outcomes[Outcome::kDisconnected],
                        f.disconnect_planned);
  report += fmt::format("| 429 (queue full) | {} |\n", f.outcomes[Outcome::kTooMany]);
  report += fmt::format("| injected forward faults (500, or an error event in a stream) | {} |\n", injected);
  report += fmt::format("| streamed / chat / chat-session turns | {} / {} / {} |\n", f.streamed, f.chat,
                        f.session_turns);
  report += fmt::format("| tokens generated / preemptions / aborted (server) | {:.0f} / {:.0f} / {:.0f} |\n", tokens,
                        preemptions, aborted);
  std::string statuses;
  for (const auto& [status, count] : f.statuses) statuses += fmt::format("{}{}: {}", statuses.empty() ? "" : ", ", status, count);
  report += fmt::format("| HTTP statuses seen | {} |\n", statuses);
  if (!f.unexpected.empty()) {
    report += "\nFirst unexpected outcomes:\n\n";
    for (const std::string& u : f.unexpected) report += "- `" + u.substr(0, 400) + "`\n";
  }
  report += fmt::format("\nResult: **{}**\n", all ? "PASS" : "FAIL");
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  if (!o.report.empty()) {
    std::ofstream out(o.report);
    out << report;
  }
  return all ? kExitOk : kExitRuntimeError;
}

}  // namespace soak_command

void RegisterSoakCommand(CommandRegistry& registry) {
  using namespace soak_command;
  auto o = std::make_shared<SoakOptions>();
  auto command_line = std::make_shared<std::string>();
  CLI::App* sub = registry.Add(kCommand, "Soak test: a long mixed workload with disconnecting clients against kvserve "
                                         "serve, then checks for leaked KV blocks, cache integrity, memory growth and 5xx",
                               [o, command_line] { return RunSoak(*o, *command_line); });
  sub->add_option("--url", o->url, "Server to test (http://host:port; needs --enable-debug-endpoints and a short "
                                   "--session-ttl); default: start `kvserve serve` here");
  sub->add_option("--server-pid", o->server_pid, "With --url: the server's pid, for the memory figures");
  sub->add_option("-m,--model", o->model, "Model of the server started here");
  sub->add_option("--model-id", o->model_id, "Model id to send (default: the first of /v1/models)");
  sub->add_option("-n,--requests", o->requests, "Requests in all")->check(CLI::Range(1, 100000000));
  sub->add_option("-c,--concurrency", o->concurrency, "Concurrent clients")->check(CLI::Range(1, 4096));
  sub->add_option("--disconnect-fraction", o->disconnect_fraction, "Clients that go away at a random point")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--invalid-fraction", o->invalid_fraction, "Invalid requests (expect 4xx)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", o->seed, "Workload seed");
  sub->add_option("--max-tokens", o->max_tokens, "Largest max_tokens of a request")->check(CLI::Range(1, 100000));
  sub->add_option("-t,--threads", o->threads, "Forward-pass threads of the server started here")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--session-ttl", o->session_ttl, "Chat session TTL of the server started here (seconds)")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--fault-every", o->fault_every, "Inject a failing forward pass every N passes (server started "
                                                   "here; 0 = none); their 500s are expected")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--api-key", o->api_key, "API key to send (and to give the server started here)");
  sub->add_option("--serve-arg", o->serve_args, "Extra argument for `kvserve serve` (repeatable, e.g. "
                                                "--serve-arg=--max-num-seqs=8)")
      ->allow_extra_args(false);
  sub->add_option("--server-log", o->server_log, "Where the started server's stderr goes");
  sub->add_option("--rss-growth-limit", o->rss_growth_limit, "Largest allowed RSS growth, percent");
  sub->add_option("--report", o->report, "Also write the report (Markdown) here");
  sub->parse_complete_callback([sub, command_line] {
    std::string line = "kvserve soak";
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty()) continue;
      for (const std::string& v : opt->results()) line += fmt::format(" --{}={}", opt->get_lnames().front(), v);
    }
    *command_line = line;
  });
}

}  // namespace kvserve::cli
