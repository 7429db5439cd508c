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

}  // namespace kvserve::cache_test
