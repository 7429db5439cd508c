#include "cache/block_pool.h"

#include <string>

namespace kvserve {

BlockPool::BlockPool(int num_blocks, int num_compact_blocks)
    : num_blocks_(num_blocks), num_ids_(num_blocks + num_compact_blocks) {
  CHECK_GT(num_blocks, 0);
  CHECK_GE(num_compact_blocks, 0);
  ref_count_.assign(num_ids_, 0);
  prev_.assign(num_ids_ + 2, kNoBlock);
  next_.assign(num_ids_ + 2, kNoBlock);
  for (int region = 0; region < 2; ++region) prev_[Sentinel(region)] = next_[Sentinel(region)] = Sentinel(region);
  for (BlockId id = 0; id < num_ids_; ++id) PushBack(id);
}

void BlockPool::Unlink(BlockId id) {
  next_[prev_[id]] = next_[id];
  prev_[next_[id]] = prev_[id];
  prev_[id] = next_[id] = kNoBlock;
  --num_free_[Region(id)];
}

void BlockPool::PushBack(BlockId id) {
  const BlockId sentinel = Sentinel(Region(id));
  const BlockId last = prev_[sentinel];
  next_[last] = id;
  prev_[id] = last;
  next_[id] = sentinel;
  prev_[sentinel] = id;
  ++num_free_[Region(id)];
}

std::optional<BlockId> BlockPool::Take(int region) {
  if (num_free_[region] == 0) return std::nullopt;
  const BlockId id = next_[Sentinel(region)];
  Unlink(id);
  ref_count_[id] = 1;
  return id;
}

std::optional<BlockId> BlockPool::Allocate() { return Take(0); }
std::optional<BlockId> BlockPool::AllocateCompact() { return Take(1); }

bool BlockPool::AllocateMany(int n, std::vector<BlockId>* out) {
  if (n > num_free()) return false;
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
  for (BlockId id = next_[Sentinel(0)]; id != Sentinel(0); id = next_[id]) out.push_back(id);
  return out;
}

Status BlockPool::VerifyIntegrity() const {
  std::vector<char> seen(num_ids_, 0);
  for (int region = 0; region < 2; ++region) {
    const BlockId sentinel = Sentinel(region);
    int count = 0;
    BlockId prev = sentinel;
    for (BlockId id = next_[sentinel]; id != sentinel; id = next_[id]) {
      if (id < 0 || id >= num_ids_ || Region(id) != region) {
        return InternalError("free list holds bad id " + std::to_string(id));
      }
      if (seen[id]) return InternalError("free list cycles at block " + std::to_string(id));
      seen[id] = 1;
      if (prev_[id] != prev) return InternalError("free list back link broken at block " + std::to_string(id));
      if (ref_count_[id] != 0) {
        return InternalError("block " + std::to_string(id) + " is on the free list with ref count " +
                             std::to_string(ref_count_[id]));
      }
      prev = id;
      if (++count > num_ids_) return InternalError("free list longer than the pool");
    }
    if (prev_[sentinel] != prev) return InternalError("free list tail link broken");
    if (count != num_free_[region]) {
      return InternalError("free list has " + std::to_string(count) + " blocks, counter says " +
                           std::to_string(num_free_[region]));
    }
  }
  for (BlockId id = 0; id < num_ids_; ++id) {
    if (ref_count_[id] < 0) return InternalError("negative ref count on block " + std::to_string(id));
    if (ref_count_[id] == 0 && !seen[id]) {
      return InternalError("block " + std::to_string(id) + " has ref count 0 but is not free");
    }
  }
  return OkStatus();
}

}  // namespace kvserve
