// Metrics: SerializeMetrics over a real engine exposes every kvserve_* metric with
// the right TYPE, values that match the engine's counters, histograms with cumulative
// buckets, the front ends' rejected counter, and an exposition `promtool check metrics`
// accepts (when promtool is installed).
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/state_dir.h"
#include "server/api/metrics.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace metrics_test {

using ::kvserve::testing::Greedy;
using ::kvserve::testing::LoadModel;
using ::kvserve::testing::MakeEngine;
using ::kvserve::testing::RunRequest;
using ::kvserve::testing::SharedFileExists;
using ::kvserve::testing::SharedPath;
using ::kvserve::testing::TestConfig;
using ::kvserve::testing::WaitFor;

std::string ModelSpec() {
  return SharedFileExists("models/stories260K.gguf") ? SharedPath("models/stories260K.gguf") : "synthetic:tiny";
}

// The value of the sample whose line starts with `series` ("name{labels}"), or NaN.
double Sample(const std::string& text, const std::string& series) {
  const std::string needle = "\n" + series + " ";
  const size_t at = text.find(needle);
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + needle.size()));
}

struct RunOutput {
  int status = -1;
  std::string output;
};

RunOutput RunShell(const std::string& command) {
  RunOutput r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(ModelSpec());
    ASSERT_NE(model_, nullptr);
    engine_ = MakeEngine(model_, TestConfig());
    ASSERT_NE(engine_, nullptr);
    ctx_.engine = engine_.get();
    ctx_.model_id = "stories260K";
    ctx_.backend_name = "cpu";
    ctx_.loading = false;
  }

  // Runs a greedy request to completion and waits for the stats snapshot that counts it
  // (published after the step that finished it).
  void RunOneRequest(int max_tokens) {
    const auto ok_total = [&] { return engine_->GetStats().requests_total[static_cast<int>(RequestOutcome::kOk)]; };
    const int64_t before = ok_total();
    const auto result = RunRequest(*engine_, Greedy({1, 2, 3, 4, 5}, max_tokens));
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    ASSERT_TRUE(WaitFor([&] { return ok_total() == before + 1; }));
  }

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  ServerContext ctx_;
};

TEST_F(MetricsTest, EveryMetricIsExposedWithItsType) {
  RunOneRequest(8);
  const std::string text = SerializeMetrics(ctx_);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"kvserve_kv_cache_usage_ratio", "gauge"},
      {"kvserve_kv_cache_blocks", "gauge"},
      {"kvserve_kv_cache_tokens", "gauge"},
      {"kvserve_kv_cache_bytes", "gauge"},
      {"kvserve_prompt_tokens_total", "counter"},
      {"kvserve_generation_tokens_total", "counter"},
      {"kvserve_tokens_per_second", "gauge"},
      {"kvserve_time_to_first_token_seconds", "histogram"},
      {"kvserve_inter_token_latency_seconds", "histogram"},
      {"kvserve_request_duration_seconds", "histogram"},
      {"kvserve_requests", "gauge"},
      {"kvserve_preemptions_total", "counter"},
      {"kvserve_kv_evictions_total", "counter"},
      {"kvserve_prefix_cache_queries_total", "counter"},
      {"kvserve_prefix_cache_hits_total", "counter"},
      {"kvserve_chat_sessions", "gauge"},
      {"kvserve_requests_total", "counter"},
      {"kvserve_info", "gauge"},
      // Extras.
      {"kvserve_step_duration_seconds", "histogram"},
      {"kvserve_kv_swapped_blocks_total", "counter"},
      {"kvserve_kv_host_blocks", "gauge"},
      {"kvserve_kv_cache_capacity_blocks", "gauge"},
      {"kvserve_grammar_compiles_total", "counter"},
      {"kvserve_grammar_forced_tokens_total", "counter"},
      {"kvserve_grammar_compile_seconds", "histogram"},
      {"kvserve_grammar_mask_seconds", "histogram"},
      {"kvserve_grammar_cache_bytes", "gauge"},
      {"kvserve_grammar_shared_mask_bytes", "gauge"},
      {"kvserve_grammar_compiling", "gauge"},
      {"kvserve_responses_not_stored_total", "counter"},
  };
  for (const auto& [name, type] : expected) {
    EXPECT_NE(text.find("# TYPE " + name + " " + type + "\n"), std::string::npos) << name << " " << type;
  }
  for (const char* state : {"used", "free", "cached", "pinned"}) {
    EXPECT_FALSE(std::isnan(Sample(text, std::string("kvserve_kv_cache_blocks{state=\"") + state + "\"}"))) << state;
  }
  for (const char* state : {"running", "waiting", "swapped"}) {
    EXPECT_EQ(Sample(text, std::string("kvserve_requests{state=\"") + state + "\"}"), 0) << state;
  }
  for (const char* reason : {"window", "prefix_lru", "session", "preemption"}) {
    EXPECT_FALSE(std::isnan(Sample(text, std::string("kvserve_kv_evictions_total{reason=\"") + reason + "\"}")))
        << reason;
  }
  EXPECT_GT(Sample(text, "kvserve_kv_cache_bytes{dtype=\"f32\"}"), 0);
  EXPECT_EQ(Sample(text, "kvserve_info{backend=\"cpu\",block_size=\"16\",kv_dtype=\"f32\",model=\"stories260K\"}"), 1);
}

TEST_F(MetricsTest, ValuesFollowTheEngine) {
  RunOneRequest(8);
  ctx_.CountRejected();
  const EngineStats stats = engine_->GetStats();
  const std::string text = SerializeMetrics(ctx_);
  EXPECT_EQ(Sample(text, "kvserve_generation_tokens_total"), static_cast<double>(stats.generation_tokens_total));
  EXPECT_EQ(Sample(text, "kvserve_generation_tokens_total"), 8);
  EXPECT_EQ(Sample(text, "kvserve_prompt_tokens_total"), static_cast<double>(stats.prompt_tokens_total));
  EXPECT_EQ(Sample(text, "kvserve_requests_total{status=\"ok\"}"), 1);
  EXPECT_EQ(Sample(text, "kvserve_requests_total{status=\"aborted\"}"), 0);
  EXPECT_EQ(Sample(text, "kvserve_requests_total{status=\"error\"}"), 0);
  EXPECT_EQ(Sample(text, "kvserve_requests_total{status=\"rejected\"}"), 1);
  EXPECT_EQ(Sample(text, "kvserve_kv_cache_blocks{state=\"used\"}"), stats.cache.used_blocks);
  EXPECT_EQ(Sample(text, "kvserve_kv_cache_capacity_blocks"), 256);
  EXPECT_EQ(Sample(text, "kvserve_prefix_cache_queries_total"), static_cast<double>(stats.cache.prefix_queries));
  EXPECT_EQ(Sample(text, "kvserve_request_duration_seconds_count"), 1);
  EXPECT_EQ(Sample(text, "kvserve_time_to_first_token_seconds_count"), 1);
  // 8 tokens: 7 gaps between consecutive tokens.
  EXPECT_EQ(Sample(text, "kvserve_inter_token_latency_seconds_count"),
            static_cast<double>(stats.inter_token_latency.count));
  const double ratio = Sample(text, "kvserve_kv_cache_usage_ratio");
  EXPECT_GE(ratio, 0);
  EXPECT_LE(ratio, 1);
}

TEST_F(MetricsTest, HistogramBucketsAreCumulative) {
  RunOneRequest(8);
  RunOneRequest(4);
  const std::string text = SerializeMetrics(ctx_);
  const std::regex bucket("\nkvserve_inter_token_latency_seconds_bucket\\{le=\"([^\"]+)\"\\} (\\d+)");
  double last = 0;
  int buckets = 0;
  bool saw_inf = false;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), bucket); it != std::sregex_iterator(); ++it) {
    const double count = std::stod((*it)[2]);
    EXPECT_GE(count, last) << (*it)[1];
    last = count;
    ++buckets;
    saw_inf = (*it)[1] == "+Inf";
  }
  EXPECT_EQ(buckets, static_cast<int>(Histogram::Latency().bounds.size()) + 1);
  EXPECT_TRUE(saw_inf);
  EXPECT_EQ(last, Sample(text, "kvserve_inter_token_latency_seconds_count"));
  EXPECT_EQ(last, 7 + 3);
  EXPECT_GT(Sample(text, "kvserve_inter_token_latency_seconds_sum"), 0);
}

TEST_F(MetricsTest, PromtoolAcceptsTheExposition) {
  if (RunShell("command -v promtool").status != 0) GTEST_SKIP() << "promtool is not installed";
  RunOneRequest(8);
  const std::string path = ::testing::TempDir() + "/kvserve_metrics.txt";
  {
    std::ofstream out(path);
    out << SerializeMetrics(ctx_);
  }
  // vLLM's names of the inference gateway's protocol carry colons on purpose; promtool's lint
  // on that is the only finding allowed.
  const RunOutput r = RunShell("promtool check metrics < " + path + " 2>&1 | grep -v \"^vllm:[a-z_]* metric names "
                               "should not contain ':'$\"");
  EXPECT_EQ(r.output, "") << r.output;
  EXPECT_NE(SerializeMetrics(ctx_).find("vllm:num_requests_waiting{model_name="), std::string::npos);
}

// With --state-dir: its write failures and size (a full or read-only disk loses what it
// promised to keep: D10's operators need to see it).
TEST_F(MetricsTest, TheStateDirectoryIsExposed) {
  const std::string dir = ::testing::TempDir() + "kvserve-metrics-state-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  StatusOr<std::unique_ptr<StateDir>> state = StateDir::Open(dir, 0);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  ctx_.state = std::move(state).value();
  ASSERT_TRUE(ctx_.state->Write("sessions", "k\ns", std::string(32, 'i'), std::string(1000, 'x')).ok());
  ctx_.state->Flush();
  const std::string text = SerializeMetrics(ctx_);
  EXPECT_NE(text.find("# TYPE kvserve_state_write_failures_total counter\n"), std::string::npos);
  EXPECT_EQ(Sample(text, "kvserve_state_write_failures_total"), 0);
  EXPECT_GT(Sample(text, "kvserve_state_bytes"), 1000);
  ctx_.state.reset();
  std::filesystem::remove_all(dir);
}

TEST(MetricsNoEngineTest, SerializesWithoutAnEngine) {
  ServerContext ctx;
  EXPECT_EQ(SerializeMetrics(ctx), "");
}

}  // namespace metrics_test
}  // namespace kvserve
