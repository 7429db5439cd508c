// One sequence through the CPU backend without the engine (KvCacheManager + CpuBackend +
// ModelRunner, F16 KV cache unless told otherwise, block 16), for the forward-pass benchmarks.
#pragma once

#include <vector>

#include "cache/kv_cache_manager.h"
#include "common/check.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model_runner.h"

namespace kvserve {

struct SingleStream {
  static KvSpec Spec(const ModelConfig& c, KvDtype kv) {
    KvSpecConfig sc;
    sc.num_layers = c.num_layers;
    sc.num_kv_heads = c.num_kv_heads;
    sc.head_dim = c.head_dim;
    sc.dtype = kv;
    return *KvSpec::Create(sc);
  }
  static CpuBackendOptions Options(int threads, int max_tokens, ComputeDtype compute, int query_tile) {
    CpuBackendOptions bo;
    bo.attention_query_tile = query_tile;
    bo.num_threads = threads;
    bo.compute_dtype = compute;
    bo.limits.max_num_tokens = max_tokens;
    bo.limits.max_num_seqs = 1;
    bo.limits.max_logits = 1;
    return bo;
  }

  SingleStream(const Model& model, int threads, int max_tokens, int blocks,
               ComputeDtype compute = ComputeDtype::kF32, KvDtype kv = KvDtype::kF16,
               int query_tile = CpuBackendOptions{}.attention_query_tile)
      : cache(Spec(model.config(), kv), blocks),
        backend(model, Options(threads, max_tokens, compute, query_tile)),
        runner(&backend, &cache, model.config().vocab_size),
        logits(model.config().vocab_size) {
    CHECK(backend.InitKvCache(cache.spec(), blocks).ok());
  }

  KvCacheManager cache;
  CpuBackend backend;
  ModelRunner runner;
  std::vector<float> logits;
};

}  // namespace kvserve
