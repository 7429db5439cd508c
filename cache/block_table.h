// BlockTable: the ordered blocks that hold one sequence's KV cache, and how many token
// positions of them are filled. Position p lives in blocks()[p / block_size] at offset
// p % block_size. Append-only except for window eviction, Truncate, swap and Free.
// Owned by KvCacheManager; engine thread only.
#pragma once

#include <span>
#include <vector>

#include "cache/block_pool.h"

namespace kvserve {

class BlockTable {
 public:
  std::span<const BlockId> blocks() const { return blocks_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_tokens() const { return num_tokens_; }
  // Token positions the table can hold without another block.
  int capacity(int block_size) const { return num_blocks() * block_size; }
  // Blocks needed to hold `num_tokens() + extra` positions beyond those present.
  int BlocksNeeded(int extra, int block_size) const {
    const int want = (num_tokens_ + extra + block_size - 1) / block_size;
    return want > num_blocks() ? want - num_blocks() : 0;
  }

  void Append(BlockId id) { blocks_.push_back(id); }
  void AddTokens(int n) { num_tokens_ += n; }
  std::vector<BlockId>& mutable_blocks() { return blocks_; }
  void set_num_tokens(int n) { num_tokens_ = n; }

 private:
  std::vector<BlockId> blocks_;
  int num_tokens_ = 0;
};

}  // namespace kvserve
