// KvBlockMap: a picture of the device pool block by block, for people (the web console's
// block map, GET /v1/cache/blocks): each block's state, the sequence holding it and how many
// token positions it holds, plus every sequence with its blocks. KvCacheManager::BlockMap()
// takes it on the engine thread; a plain value afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kvserve {

using SeqId = uint64_t;

// Each device block is in exactly one state. A pinned block counts as pinned even when
// sequences also hold it; a block two or more holders reference (prefix sharing, n > 1
// forks) is shared.
enum class BlockState : uint8_t {
  kFree = 0,    // unreferenced, holding nothing reusable
  kUsed = 1,    // referenced by one sequence
  kCached = 2,  // unreferenced, holding a reusable prefix (evictable, LRU)
  kPinned = 3,  // a pinned prefix: never evicted
  kShared = 4,  // referenced by two or more holders
};
inline constexpr int kNumBlockStates = 5;
inline const char* BlockStateName(BlockState s) {
  switch (s) {
    case BlockState::kFree: return "free";
    case BlockState::kUsed: return "used";
    case BlockState::kCached: return "cached";
    case BlockState::kPinned: return "pinned";
    case BlockState::kShared: return "shared";
  }
  return "unknown";
}

struct KvBlockMap {
  struct Seq {
    SeqId id = 0;
    int num_tokens = 0;       // token positions its table covers
    int num_blocks = 0;       // device blocks (0 while swapped)
    int num_host_blocks = 0;  // host-tier slots (while swapped)
    bool swapped = false;
  };
  int block_size = 0;
  // Per block id: the main region [0, num_blocks()), then the compaction region (old context
  // re-encoded in a smaller dtype, KvCacheManager::Compact), whose blocks are only ever free,
  // used or shared.
  std::vector<BlockState> state;  // [num_blocks + num_compact_blocks]
  std::vector<int32_t> holder;    // index into `seqs` of the holder with the lowest id; -1: none
  std::vector<uint16_t> fill;     // token positions written (free: 0; cached, pinned: full)
  std::vector<Seq> seqs;          // every sequence the manager knows, by id
  std::array<int, kNumBlockStates> counts{};          // main-region blocks per state
  std::array<int, kNumBlockStates> compact_counts{};  // compaction-region blocks per state
  int num_compact_blocks = 0;
  int host_total_blocks = 0;
  int host_used_blocks = 0;
  int prefix_indexed = 0;  // main-region blocks in the prefix index (reusable by a later prompt)

  int num_blocks() const { return static_cast<int>(state.size()) - num_compact_blocks; }
  int count(BlockState s) const { return counts[static_cast<size_t>(s)]; }
};

}  // namespace kvserve
