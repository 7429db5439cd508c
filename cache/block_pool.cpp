#include "cache/block_pool.h"

#include <string>

namespace kvserve {

BlockPool::BlockPool(int num_blocks) : num_blocks_(num_blocks) {
  CHECK_GT(num_blocks, 0);
  ref_count_.assign(num_blocks, 0);
  prev_.assign(num_blocks + 1, num_blocks);
  next_.assign(num_blocks + 1, num_blocks);
  for (BlockId id = 0; id < num_blocks; ++id) PushBack(id);
}

void BlockPool::Unlink(BlockId id) {
  next_[prev_[id]] = next_[id];
  prev_[next_[id]] = prev_[id];
  prev_[id] = next_[id] = kNoBlock;
  --num_free_;
}

void BlockPool::PushBack(BlockId id) {
  const BlockId sentinel = num_blocks_;
  const BlockId last = prev_[sentinel];
  next_[last] = id;
  prev_[id] = last;
  next_[id] = sentinel;
  prev_[sentinel] = id;
  ++num_free_;
}

std::optional<BlockId> BlockPool::Allocate() {
  if (num_free_ == 0) return std::nullopt;
  const BlockId id = next_[num_blocks_];
  Unlink(id);
  ref_count_[id] = 1;
  return id;
}

bool BlockPool::AllocateMany(int n, std::vector<BlockId>* out) {
  if (n > num_free_) return false;
  for (int i = 0; i < n; ++i) out->push_back(*Allocate());
  return true;
}

void BlockPool::Acquire(BlockId id) {
  if (ref_count_[Checked(id)] == 0) Unlink(id);
  ++ref_count_[id];
}

void BlockPool::Release(BlockId id) {
  CHECK_GT(ref_count_[Checked(id)], 0) << "double free of block " << id;
  if (--ref_count_[id] == 0) PushBack(id);
}

std::vector<BlockId> BlockPool::FreeListForTest() const {
  std::vector<BlockId> out;
  for (BlockId id = next_[num_blocks_]; id != num_blocks_; id = next_[id]) out.push_back(id);
  return out;
}

Status BlockPool::VerifyIntegrity() const {
  std::vector<char> seen(num_blocks_, 0);
  int count = 0;
  BlockId prev = num_blocks_;
  for (BlockId id = next_[num_blocks_]; id != num_blocks_; id = next_[id]) {
    if (id < 0 || id >= num_blocks_) return InternalError("free list holds bad id " + std::to_string(id));
    if (seen[id]) return InternalError("free list cycles at block " + std::to_string(id));
    seen[id] = 1;
    if (prev_[id] != prev) return InternalError("free list back link broken at block " + std::to_string(id));
    if (ref_count_[id] != 0) {
      return InternalError("block " + std::to_string(id) + " is on the free list with ref count " +
                           std::to_string(ref_count_[id]));
    }
    prev = id;
    if (++count > num_blocks_) return InternalError("free list longer than the pool");
  }
  if (prev_[num_blocks_] != prev) return InternalError("free list tail link broken");
  if (count != num_free_) {
    return InternalError("free list has " + std::to_string(count) + " blocks, counter says " +
                         std::to_string(num_free_));
  }
  for (BlockId id = 0; id < num_blocks_; ++id) {
    if (ref_count_[id] < 0) return InternalError("negative ref count on block " + std::to_string(id));
    if (ref_count_[id] == 0 && !seen[id]) {
      return InternalError("block " + std::to_string(id) + " has ref count 0 but is not free");
    }
  }
  return OkStatus();
}

}  // namespace kvserve
