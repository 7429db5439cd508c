// End to end on the GPU: stories260K's greedy tokens through the CUDA backend (paged cache,
// model runner, argmax). F32 device weights: identical to the CPU engine and to the reference
// goldens, F32 and F16 KV. Production F16 weights: identical to the CPU engine on the same F16
// weights except at near ties (see the test). Skips without a CUDA device or ../shared.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace cuda_golden_test {

constexpr char kModel[] = "models/stories260K.gguf";
constexpr char kGolden[] = "golden/stories260K-greedy.jsonl";

int Argmax(std::span<const float> logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per step
};

// Prompt in one batch, then one token per step (as the reference ran).
Greedy RunGreedy(const Model& model, Backend* backend, KvDtype dtype, const std::vector<int32_t>& prompt, int n) {
  const ModelConfig& c = model.config();
  KvSpecConfig sc;
  sc.num_layers = c.num_layers;
  sc.num_kv_heads = c.num_kv_heads;
  sc.head_dim = c.head_dim;
  sc.dtype = dtype;
  KvCacheManager cache(*KvSpec::Create(sc), 64);
  EXPECT_TRUE(backend->InitKvCache(cache.spec(), 64).ok());
  ModelRunner runner(backend, &cache, c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> all = prompt;
  Greedy out;
  int computed = 0;
  for (int step = 0; step < n; ++step) {
    const int count = static_cast<int>(all.size()) - computed;
    EXPECT_TRUE(cache.AllocateSlots(1, count).has_value());
    ScheduledSeq s{1, std::span(all).subspan(computed, count), computed, true};
    const Status st = runner.Execute(std::span(&s, 1), logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) break;
    computed = static_cast<int>(all.size());
    out.tokens.push_back(Argmax(logits));
    out.logits.push_back(logits);
    all.push_back(out.tokens.back());
  }
  return out;
}

std::vector<nlohmann::json> ReadGolden() {
  std::vector<nlohmann::json> golden;
  std::ifstream in(testing::SharedPath(kGolden));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) golden.push_back(nlohmann::json::parse(line));
  }
  return golden;
}

TEST(CudaGolden, F32WeightsReproduceTheCpuEngineAndTheGoldensExactly) {
  REQUIRE_CUDA_DEVICE();
  REQUIRE_SHARED_FILE(kModel);
  REQUIRE_SHARED_FILE(kGolden);
  auto model = Model::Load(testing::SharedPath(kModel));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<nlohmann::json> golden = ReadGolden();
  ASSERT_FALSE(golden.empty());
  CpuBackendOptions co;
  co.limits.max_num_tokens = 512;
  CpuBackend cpu(**model, co);
  CudaBackendOptions o;
  o.limits.max_num_tokens = 512;
  o.weight_type = CudaWeightType::kF32;
  auto cuda = CreateCudaBackend(**model, o);
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  for (KvDtype kv : {KvDtype::kF32, KvDtype::kF16}) {
    for (const auto& g : golden) {
      const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
      const auto want = g["tokens"].get<std::vector<int32_t>>();
      const int n = static_cast<int>(want.size());
      const std::vector<int32_t> on_cpu = RunGreedy(**model, &cpu, kv, prompt, n).tokens;
      const std::vector<int32_t> on_gpu = RunGreedy(**model, cuda->get(), kv, prompt, n).tokens;
      EXPECT_EQ(on_gpu, on_cpu) << "kv " << KvDtypeName(kv) << " prompt " << g["prompt"];
      EXPECT_EQ(on_gpu, want) << "kv " << KvDtypeName(kv) << " prompt " << g["prompt"];
    }
  }
}

TEST(CudaGolden, F16WeightsFollowTheCpuEngineOnTheSameWeights) {
  // Production path: F16 weights and F16 GEMM inputs on the device vs the CPU engine on the
  // same F16 weights (F32 activations). The extra rounding of the activations moves logits by
  // ~1e-3, so a greedy token may flip only where the CPU itself sees a near tie: at the first
  // step where a prompt's tokens differ, the CPU's logit of its own choice may exceed its
  // logit of the GPU's choice by at most kTieMargin (the runs agree on every earlier token, so
  // they see the same context there). F16 KV: INT8 KV is left to the numeric comparisons of
  // cuda_backend_test (rounding F16 activations moves ~10% of the INT8 K/V values by one
  // quantization step; in a CPU emulation of these kernels one prompt flipped at a CPU
  // margin of 0.049).
  constexpr float kTieMargin = 0.05f;
  REQUIRE_CUDA_DEVICE();
  REQUIRE_SHARED_FILE(kModel);
  REQUIRE_SHARED_FILE(kGolden);
  ModelLoadOptions lo;
  lo.matrix_type = GgmlType::kF16;
  auto model = Model::Load(testing::SharedPath(kModel), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<nlohmann::json> golden = ReadGolden();
  CpuBackendOptions co;
  co.limits.max_num_tokens = 512;
  CpuBackend cpu(**model, co);
  CudaBackendOptions o;
  o.limits.max_num_tokens = 512;
  auto cuda = CreateCudaBackend(**model, o);
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  for (KvDtype kv : {KvDtype::kF16}) {
    int identical = 0;
    for (const auto& g : golden) {
      const auto prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
      const int n = static_cast<int>(g["tokens"].size());
      const Greedy on_cpu = RunGreedy(**model, &cpu, kv, prompt, n);
      const Greedy on_gpu = RunGreedy(**model, cuda->get(), kv, prompt, n);
      ASSERT_EQ(on_gpu.tokens.size(), on_cpu.tokens.size());
      size_t step = 0;
      while (step < on_cpu.tokens.size() && on_gpu.tokens[step] == on_cpu.tokens[step]) ++step;
      if (step == on_cpu.tokens.size()) {
        ++identical;
        continue;
      }
      const std::vector<float>& l = on_cpu.logits[step];
      const float margin = l[on_cpu.tokens[step]] - l[on_gpu.tokens[step]];
      std::printf("kv %s: prompt %s diverges at step %zu (CPU logit margin %.4f)\n",
                  std::string(KvDtypeName(kv)).c_str(), g["prompt"].dump().c_str(), step, margin);
      EXPECT_LE(margin, kTieMargin) << KvDtypeName(kv) << " prompt " << g["prompt"] << " step " << step;
    }
    std::printf("kv %s: %d of %zu prompts identical to the CPU engine\n", std::string(KvDtypeName(kv)).c_str(),
                identical, golden.size());
  }
}

}  // namespace cuda_golden_test
}  // namespace kvserve
