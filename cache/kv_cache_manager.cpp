#include "cache/kv_cache_manager.h"

#include <string>

namespace kvserve {

KvCacheManager::KvCacheManager(KvSpec spec, int num_blocks)
    : spec_(std::move(spec)), pool_(num_blocks) {}

int KvCacheManager::BlocksNeeded(SeqId seq, int num_new_tokens) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return (num_new_tokens + block_size() - 1) / block_size();
  return it->second.BlocksNeeded(num_new_tokens, block_size());
}

std::optional<std::vector<BlockId>> KvCacheManager::AllocateSlots(SeqId seq, int num_new_tokens) {
  CHECK_GE(num_new_tokens, 0);
  const int needed = BlocksNeeded(seq, num_new_tokens);
  std::vector<BlockId> added;
  if (!pool_.AllocateMany(needed, &added)) return std::nullopt;
  BlockTable& table = tables_[seq];
  for (BlockId id : added) table.Append(id);
  table.AddTokens(num_new_tokens);
  return added;
}

void KvCacheManager::Free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  // Release in reverse so the sequence's last blocks are reused first and its first blocks
  // (the ones a prefix cache would most likely hit) stay longest.
  auto blocks = it->second.blocks();
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.Release(*b);
  tables_.erase(it);
}

const BlockTable& KvCacheManager::table(SeqId seq) const {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  return it->second;
}

Status KvCacheManager::VerifyIntegrity() const {
  RETURN_IF_ERROR(pool_.VerifyIntegrity());
  std::vector<int> holders(pool_.num_blocks(), 0);
  for (const auto& [seq, table] : tables_) {
    if (table.num_tokens() > table.capacity(block_size())) {
      return InternalError("sequence " + std::to_string(seq) + " holds " +
                           std::to_string(table.num_tokens()) + " tokens in " +
                           std::to_string(table.num_blocks()) + " blocks");
    }
    for (BlockId b : table.blocks()) {
      if (b < 0 || b >= pool_.num_blocks()) {
        return InternalError("sequence " + std::to_string(seq) + " has bad block " + std::to_string(b));
      }
      ++holders[b];
    }
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    if (holders[b] != pool_.ref_count(b)) {
      return InternalError("block " + std::to_string(b) + " has ref count " +
                           std::to_string(pool_.ref_count(b)) + " but " + std::to_string(holders[b]) +
                           " tables hold it");
    }
  }
  return OkStatus();
}

}  // namespace kvserve
