// Small helpers of the KvCacheManager tests.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "cache/kv_cache_manager.h"

namespace kvserve::cache_test {

// A copy of sequence `s`'s block table.
inline std::vector<BlockId> Blocks(const KvCacheManager& m, SeqId s) {
  auto b = m.table(s).blocks();
  return {b.begin(), b.end()};
}

// Token ids first, first + 1, ..., n of them.
inline std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A manager config with a compaction region of `num_compact` INT8 blocks beside a cache of
// 1 layer, 1 KV head, head_dim 8 and 4-token blocks; every operation verified.
inline KvCacheManagerConfig CompactConfig(int num_blocks, int num_compact, int num_host = 0) {
  KvCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.num_host_blocks = num_host;
  c.num_compact_blocks = num_compact;
  KvSpecConfig sc;
  sc.num_layers = 1;
  sc.num_kv_heads = 1;
  sc.head_dim = 8;
  sc.block_size = 4;
  sc.dtype = KvDtype::kInt8;
  c.compact_spec = *KvSpec::Create(sc);
  c.test_hooks.verify_each_operation = true;
  return c;
}

}  // namespace kvserve::cache_test
