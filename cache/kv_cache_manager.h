// KvCacheManager: the only cache type the scheduler sees. It owns the BlockPool and one
// BlockTable per sequence, and answers "does this fit?" with std::nullopt instead of failing.
//
// Contract with the scheduler: AllocateSlots(seq, n) reserves positions for n more tokens of
// seq (blocks are taken from the pool only when the table is full); if the pool cannot supply
// them nothing changes and nullopt says "preempt or wait". Free(seq) returns every block.
// A sequence only ever writes positions in blocks it owns with ref count 1.
//
// Engine thread only; no locks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/kv_spec.h"

namespace kvserve {

using SeqId = uint64_t;

class KvCacheManager {
 public:
  // REQUIRES: num_blocks > 0.
  KvCacheManager(KvSpec spec, int num_blocks);

  const KvSpec& spec() const { return spec_; }
  int block_size() const { return spec_.block_size(); }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free_blocks() const { return pool_.num_free(); }
  int num_used_blocks() const { return pool_.num_used(); }
  // Fraction of blocks in use, 0..1.
  double usage_ratio() const { return static_cast<double>(num_used_blocks()) / num_blocks(); }

  // Reserves positions for `num_new_tokens` more tokens of `seq` (a new sequence starts
  // empty). Returns the blocks appended to its table (possibly none), or nullopt when the pool
  // cannot supply them; then nothing changed.
  [[nodiscard]] std::optional<std::vector<BlockId>> AllocateSlots(SeqId seq, int num_new_tokens);
  // Blocks AllocateSlots would need to take for `num_new_tokens` more tokens.
  [[nodiscard]] int BlocksNeeded(SeqId seq, int num_new_tokens) const;
  // Returns all of seq's blocks to the pool and forgets it. No-op for unknown ids.
  void Free(SeqId seq);

  bool Contains(SeqId seq) const { return tables_.count(seq) != 0; }
  // REQUIRES: Contains(seq).
  const BlockTable& table(SeqId seq) const;
  int num_sequences() const { return static_cast<int>(tables_.size()); }

  // Pool integrity plus: every table's blocks are referenced, each table covers its tokens,
  // and ref counts equal the number of tables holding each block.
  [[nodiscard]] Status VerifyIntegrity() const;

 private:
  KvSpec spec_;
  BlockPool pool_;
  std::unordered_map<SeqId, BlockTable> tables_;
};

}  // namespace kvserve
