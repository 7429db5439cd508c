// Test helpers for the KV cache tests that run a real model: a model + KvCacheManager +
// CpuBackend + ModelRunner bundle, and small utilities. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model_runner.h"

namespace kvserve::testing {

inline std::unique_ptr<Model> LoadModelOrDie(const std::string& spec, int num_layers = 0, uint64_t seed = 7) {
  ModelLoadOptions o;
  o.seed = seed;
  o.num_layers_override = num_layers;
  auto m = Model::Load(spec, o);
  CHECK(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

inline std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(3 + rng() % (vocab - 3));
  return t;
}

inline KvSpec SpecFor(const Model& model, KvDtype dtype, int block_size) {
  KvSpecConfig c;
  c.num_layers = model.config().num_layers;
  c.num_kv_heads = model.config().num_kv_heads;
  c.head_dim = model.config().head_dim;
  c.block_size = block_size;
  c.dtype = dtype;
  return *KvSpec::Create(c);
}

struct KvHarness {
  KvHarness(const Model& m, const KvSpec& spec, KvCacheManagerConfig config,
            ComputeDtype compute = ComputeDtype::kF32)
      : model(m) {
    config.test_hooks.verify_each_operation = true;
    cache = std::make_unique<KvCacheManager>(spec, config);
    CpuBackendOptions bo;
    bo.limits.max_num_tokens = 256;
    bo.compute_dtype = compute;
    backend = std::make_unique<CpuBackend>(m, bo);
    CHECK(backend->InitKvCache(cache->spec(), config.num_blocks).ok());
    if (config.num_compact_blocks > 0) {
      CHECK(backend->InitCompactKvCache(*config.compact_spec, config.num_compact_blocks).ok());
    }
    runner = std::make_unique<ModelRunner>(backend.get(), cache.get(), m.config().vocab_size);
  }

  // Reserves and computes `tokens` at cache positions [start, start + n) of `seq` and returns
  // the last token's logits.
  std::vector<float> Run(SeqId seq, std::span<const int32_t> tokens, int start) {
    std::vector<float> logits(model.config().vocab_size);
    EXPECT_TRUE(cache->AllocateSlots(seq, static_cast<int>(tokens.size())).has_value());
    ScheduledSeq s{seq, tokens, start, true};
    const Status st = runner->Execute(std::span(&s, 1), logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return logits;
  }

  const Model& model;
  std::unique_ptr<KvCacheManager> cache;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<ModelRunner> runner;
};

inline float MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  CHECK_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace kvserve::testing
