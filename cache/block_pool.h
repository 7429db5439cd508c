// BlockPool: ids, reference counts and the free list of the KV cache's fixed-size blocks.
//
// Block ids are dense ints in [0, num_blocks); the bytes live in a backend-owned arena at
// id * KvSpec::block_bytes(). An optional *compact region* follows: ids [num_blocks,
// num_blocks + num_compact_blocks) name smaller blocks of the compaction dtype (old context
// re-encoded, KvCacheManager::Compact), with their own free list. A block is *free* when its
// ref count is 0; free blocks sit in an intrusive doubly-linked list per region ordered by
// when they were freed, so Allocate() reuses the least recently freed block first (LRU for
// cached prefix blocks, which keep their contents while free and can be revived by
// Acquire()). Invariants (VerifyIntegrity): a block is on its region's free list iff its ref
// count is 0; the lists are well linked and their lengths are num_free() and
// num_compact_free().
//
// Engine thread only; no locks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"

namespace kvserve {

using BlockId = int32_t;
constexpr BlockId kNoBlock = -1;

class BlockPool {
 public:
  // REQUIRES: num_blocks > 0, num_compact_blocks >= 0.
  explicit BlockPool(int num_blocks, int num_compact_blocks = 0);

  // The main region (every count below but the compact ones is about it).
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return num_free_[0]; }
  int num_used() const { return num_blocks_ - num_free_[0]; }
  // The compact region.
  int num_compact_blocks() const { return num_ids_ - num_blocks_; }
  int num_compact_free() const { return num_free_[1]; }
  // Every id of both regions is in [0, num_ids()).
  int num_ids() const { return num_ids_; }
  bool is_compact(BlockId id) const { return Checked(id) >= static_cast<size_t>(num_blocks_); }

  // Takes the block at the head of the main (or compact) free list (least recently freed); its
  // ref count becomes 1. nullopt when no block is free there.
  [[nodiscard]] std::optional<BlockId> Allocate();
  [[nodiscard]] std::optional<BlockId> AllocateCompact();
  // Takes `n` blocks or none. Appends them to `out` in allocation order.
  [[nodiscard]] bool AllocateMany(int n, std::vector<BlockId>* out);

  // Adds a reference. A free block (ref 0) leaves the free list (a revived cached block).
  void Acquire(BlockId id);
  // Drops a reference; at 0 the block goes to the tail of the free list.
  // REQUIRES: ref_count(id) > 0.
  void Release(BlockId id);

  int ref_count(BlockId id) const { return ref_count_[Checked(id)]; }
  bool is_free(BlockId id) const { return ref_count_[Checked(id)] == 0; }
  // Main free-list order, head first (tests).
  std::vector<BlockId> FreeListForTest() const;

  [[nodiscard]] Status VerifyIntegrity() const;

 private:
  size_t Checked(BlockId id) const {
    CHECK(id >= 0 && id < num_ids_) << "block id " << id << " out of range";
    return static_cast<size_t>(id);
  }
  int Region(BlockId id) const { return id >= num_blocks_ ? 1 : 0; }
  BlockId Sentinel(int region) const { return num_ids_ + region; }
  std::optional<BlockId> Take(int region);
  void Unlink(BlockId id);
  void PushBack(BlockId id);

  int num_blocks_;
  int num_ids_;
  int num_free_[2] = {0, 0};  // main, compact
  std::vector<int32_t> ref_count_;
  // Free list links; indices num_ids_ and num_ids_ + 1 are the main and compact sentinels.
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
};

}  // namespace kvserve
