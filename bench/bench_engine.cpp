// In-process engine benchmarks (continuous batching, KV cache, sessions), printed as markdown tables:
//
//   bench_engine throughput [--model SPEC]... [--threads N]
//       Concurrency 1, 4, 16, 64: each client streams 128-token greedy completions of the
//       BASELINE prompt one after another (16 requests in all, at least 2 per client).
//       Aggregate generated tokens/s, mean step time, mean tokens per step, mean TTFT.
//   bench_engine profile [--model SPEC]... [--threads N]
//       Where a step's time goes at 1 and 16 concurrent streams (scheduling, batch building,
//       forward by operation, sampling, detokenizing, publishing).
//   bench_engine sessions [--model SPEC]... [--threads N]
//       A 16-turn chat (each turn resends the whole history plus a new user line and gets 32
//       tokens): time to first token per turn with a server-side session against the same
//       turns without one (prefix caching off), so the history is prefilled again each turn.
//   bench_engine tradeoff [--model SPEC]... [--threads N]
//       KV cache vs no cache (every token recomputes the whole sequence) for prompt lengths
//       16 ... 4096: time per generated token, total time, speedup.
//
// Figures of the two sides of each comparison are measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace kvserve {
namespace {

constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily. She loved to play outside.";

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const Model> model, EngineConfig config, int threads,
                                   Profiler* profiler = nullptr) {
  config.profiler = profiler;
  BackendConfig backend_config = BackendConfigFor(config);
  backend_config.num_threads = threads;
  auto backend = CreateBackend(backend_config, *model);
  CHECK(backend.ok()) << backend.status().ToString();
  auto engine = Engine::Create(config, model, std::move(*backend));
  CHECK(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

EngineConfig BaseConfig(const Model& model, int max_len) {
  EngineConfig c;
  c.kv.dtype = KvDtype::kF16;
  c.kv.block_size = 16;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 512;
  c.max_model_len = max_len;
  // Room for 64 sequences of max_len tokens.
  c.num_blocks = 64 * ((max_len + 15) / 16) + 16;
  return c;
}

struct RunStats {
  int64_t tokens = 0;
  double ttft_sum = 0;
  int requests = 0;
};

// Runs `clients` concurrent clients, each streaming `per_client` 128-token greedy completions.
struct LoadResult {
  int64_t tokens = 0;
  double ttft_sum = 0;
  int requests = 0;
  double wall = 0;
};

LoadResult RunLoad(Engine& engine, const std::vector<int32_t>& prompt, int clients, int per_client) {
  std::vector<RunStats> stats(clients);
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int c = 0; c < clients; ++c) {
    workers.emplace_back([&, c] {
      for (int i = 0; i < per_client; ++i) {
        GenerationRequest r;
        r.prompt_tokens = prompt;
        r.sampling.temperature = 0;
        r.sampling.max_tokens = 128;
        r.sampling.ignore_eos = true;
        auto stream = engine.Submit(r);
        CHECK(stream.ok()) << stream.status().ToString();
        std::vector<StreamDelta> deltas;
        while ((*stream)->Next(&deltas)) deltas.clear();
        const RequestUsage u = (*stream)->usage();
        stats[c].tokens += u.completion_tokens;
        stats[c].ttft_sum += u.time_to_first_token_s;
        ++stats[c].requests;
      }
    });
  }
  for (auto& w : workers) w.join();
  LoadResult total;
  total.wall = Seconds(Clock::now() - start);
  for (const RunStats& s : stats) {
    total.tokens += s.tokens;
    total.ttft_sum += s.ttft_sum;
    total.requests += s.requests;
  }
  return total;
}

void Profile(const std::string& spec, std::shared_ptr<const Model> model, int threads) {
  const std::vector<int32_t> prompt = model->tokenizer().Encode(kPrompt, true);
  for (int clients : {1, 16}) {
    Profiler profiler;
    auto engine = MakeEngine(model, BaseConfig(*model, 512), threads, &profiler);
    RunLoad(*engine, prompt, clients, clients == 1 ? 2 : 1);
    std::printf("\n### %s, %d concurrent stream(s), %d threads\n\n%s", spec.c_str(), clients, threads,
                profiler.Report().c_str());
    std::fflush(stdout);
  }
}

void Throughput(const std::string& spec, std::shared_ptr<const Model> model, int threads) {
  const std::vector<int32_t> prompt = model->tokenizer().Encode(kPrompt, true);
  std::printf("\n### %s (%d threads)\n\n", spec.c_str(), threads);
  std::printf("| clients | requests | generated tok/s | mean step ms | mean tokens/step | mean TTFT ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int clients : {1, 4, 16, 64}) {
    auto engine = MakeEngine(model, BaseConfig(*model, 512), threads);
    const LoadResult total = RunLoad(*engine, prompt, clients, std::max(2, 16 / clients));
    const double wall = total.wall;
    const EngineStats es = engine->GetStats();
    const double step_ms = es.step_duration.count ? 1e3 * es.step_duration.sum / es.step_duration.count : 0;
    const double per_step = es.steps ? static_cast<double>(es.prompt_tokens_total + es.generation_tokens_total) / es.steps : 0;
    std::printf("| %d | %d | %.0f | %.2f | %.1f | %.1f |\n", clients, total.requests, total.tokens / wall, step_ms,
                per_step, 1e3 * total.ttft_sum / total.requests);
    std::fflush(stdout);
  }
}

// Seconds per generated token after the first (the engine's own clock: (duration - TTFT) /
// (n - 1), so the client's wake-ups and the coalescing of deltas do not blur it), and in all.
struct Timing {
  double per_token = 0;
  double total = 0;
};

Timing Generate(Engine& engine, const std::vector<int32_t>& prompt, int n) {
  GenerationRequest r;
  r.prompt_tokens = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = n;
  r.sampling.ignore_eos = true;
  auto stream = engine.Submit(r);
  CHECK(stream.ok()) << stream.status().ToString();
  std::vector<StreamDelta> deltas;
  while ((*stream)->Next(&deltas)) deltas.clear();
  const RequestUsage u = (*stream)->usage();
  CHECK_EQ(u.completion_tokens, n);
  return {(u.duration_s - u.time_to_first_token_s) / (n - 1), u.duration_s};
}

void Sessions(const std::string& spec, std::shared_ptr<const Model> model, int threads) {
  constexpr int kTurns = 16, kAnswer = 32;
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> line = tok.Encode(" Then the little dog said hello to the cat again.", false);
  EngineConfig config = BaseConfig(*model, model->config().context_length);
  config.max_num_batched_tokens = 4096;  // each prefill in one step, as a fair single-stream figure
  config.enable_prefix_caching = false;  // the session alone keeps the history
  config.max_num_seqs = 4;
  config.num_blocks = 4 * ((config.max_model_len + 15) / 16) + 16;
  auto with = MakeEngine(model, config, threads);
  auto without = MakeEngine(model, config, threads);
  std::printf("\n### %s (%d threads): TTFT per turn, %d answer tokens per turn\n\n", spec.c_str(), threads, kAnswer);
  std::printf("| turn | history tokens | TTFT ms with session | prefilled tokens | TTFT ms without | prefilled tokens |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::vector<int32_t> history = tok.Encode(kPrompt, true);
  for (int turn = 1; turn <= kTurns; ++turn) {
    if (static_cast<int>(history.size()) + kAnswer > config.max_model_len) break;
    RequestUsage u[2];
    std::vector<int32_t> answer;
    for (int side = 0; side < 2; ++side) {
      GenerationRequest r;
      r.prompt_tokens = history;
      r.sampling.temperature = 0;
      r.sampling.max_tokens = kAnswer;
      r.sampling.ignore_eos = true;
      if (side == 0) r.session_id = "bench";
      auto stream = (side == 0 ? *with : *without).Submit(r);
      CHECK(stream.ok()) << stream.status().ToString();
      std::vector<StreamDelta> deltas;
      answer.clear();
      while ((*stream)->Next(&deltas)) {
        for (const StreamDelta& d : deltas) answer.insert(answer.end(), d.token_ids.begin(), d.token_ids.end());
        deltas.clear();
      }
      u[side] = (*stream)->usage();
    }
    std::printf("| %d | %zu | %.2f | %d | %.2f | %d |\n", turn, history.size(), 1e3 * u[0].time_to_first_token_s,
                u[0].prompt_tokens - u[0].cached_prompt_tokens, 1e3 * u[1].time_to_first_token_s,
                u[1].prompt_tokens - u[1].cached_prompt_tokens);
    std::fflush(stdout);
    history.insert(history.end(), answer.begin(), answer.end());
    history.insert(history.end(), line.begin(), line.end());
  }
}

void Tradeoff(const std::string& spec, std::shared_ptr<const Model> model, int threads) {
  const int max_len = model->config().context_length;
  constexpr int kGenerated = 16;
  std::printf("\n### %s (%d threads, %d generated tokens per length)\n\n", spec.c_str(), threads, kGenerated);
  std::printf("| prompt tokens | ms/token with cache | ms/token without | total s with cache | total s without | speedup per token |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::vector<int32_t> base = model->tokenizer().Encode(kPrompt, false);
  for (int len : {16, 32, 64, 128, 256, 512, 1024, 2048, 4096}) {
    if (len >= max_len) break;
    len = std::min(len, max_len - kGenerated);  // the last row ends exactly at the context
    std::vector<int32_t> prompt = {model->tokenizer().bos_id()};
    while (static_cast<int>(prompt.size()) < len) prompt.push_back(base[prompt.size() % base.size()]);
    EngineConfig config = BaseConfig(*model, len + kGenerated);
    config.max_num_seqs = 1;
    config.max_num_batched_tokens = len + kGenerated;
    config.enable_prefix_caching = false;
    auto cached = MakeEngine(model, config, threads);
    const Timing with = Generate(*cached, prompt, kGenerated);
    cached.reset();
    config.recompute_every_token = true;
    auto recompute = MakeEngine(model, config, threads);
    const Timing without = Generate(*recompute, prompt, kGenerated);
    std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.1fx |\n", len, 1e3 * with.per_token, 1e3 * without.per_token,
                with.total, without.total, without.per_token / with.per_token);
    std::fflush(stdout);
  }
}

int Main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "throughput") != 0 && std::strcmp(argv[1], "tradeoff") != 0 &&
                    std::strcmp(argv[1], "profile") != 0 && std::strcmp(argv[1], "sessions") != 0)) {
    std::fprintf(stderr, "usage: bench_engine throughput|tradeoff|profile|sessions [--model SPEC]... [--threads N]\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::vector<std::string> specs;
  int threads = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) specs.push_back(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  if (specs.empty()) specs = {"synthetic:150m"};
  for (const std::string& spec : specs) {
    auto model = Model::Load(spec);
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.c_str(), model.status().ToString().c_str());
      return 1;
    }
    std::shared_ptr<const Model> shared(std::move(model).value());
    if (mode == "throughput") {
      Throughput(spec, shared, threads);
    } else if (mode == "profile") {
      Profile(spec, shared, threads);
    } else if (mode == "sessions") {
      Sessions(spec, shared, threads);
    } else {
      Tradeoff(spec, shared, threads);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
