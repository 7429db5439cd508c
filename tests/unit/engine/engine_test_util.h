// Helpers for engine tests: build an engine on a model, run requests to completion.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/test_paths.h"

namespace kvserve::testing {

inline std::shared_ptr<const Model> LoadModel(const std::string& spec) {
  auto m = Model::Load(spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::shared_ptr<const Model>(std::move(m).value());
}

inline std::shared_ptr<const Model> Stories() { return LoadModel(SharedPath("models/stories260K.gguf")); }

inline EngineConfig TestConfig(int num_blocks = 256) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.kv.dtype = KvDtype::kF32;
  c.kv.block_size = 16;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 256;
  c.test_hooks.verify_integrity_each_step = true;
  c.session_busy_wait_seconds = 0;  // a busy session fails its next turn at once (tests that want the wait set it)
  return c;
}

inline std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const Model> model, const EngineConfig& config) {
  BackendConfig backend_config = BackendConfigFor(config);
  backend_config.num_threads = 1;
  auto backend = CreateBackend(backend_config, *model);
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  auto engine = Engine::Create(config, model, std::move(backend).value());
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> finish;
  std::string matched_stop;
};

struct RunResult {
  std::vector<ChoiceResult> choices;
  Status status;
  RequestUsage usage;
};

inline RunResult Collect(RequestStream& stream) {
  RunResult r;
  r.choices.resize(stream.num_choices());
  std::vector<StreamDelta> deltas;
  while (stream.Next(&deltas)) {
    for (StreamDelta& d : deltas) {
      ChoiceResult& c = r.choices[d.index];
      c.tokens.insert(c.tokens.end(), d.token_ids.begin(), d.token_ids.end());
      c.text += d.text;
      if (d.finish_reason) {
        c.finish = d.finish_reason;
        c.matched_stop = d.matched_stop;
      }
    }
    deltas.clear();
  }
  r.status = stream.status();
  r.usage = stream.usage();
  return r;
}

inline RunResult RunRequest(Engine& engine, GenerationRequest request) {
  auto stream = engine.Submit(std::move(request));
  EXPECT_TRUE(stream.ok()) << stream.status().ToString();
  if (!stream.ok()) return {};
  return Collect(**stream);
}

inline GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// Polls `condition` until it holds or `seconds` pass (no fixed sleeps).
template <typename F>
bool WaitFor(F condition, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

}  // namespace kvserve::testing
