// KeyStaging: the F16 key rows of INT4C blocks that are still being filled (kv_spec.h).
//
// INT4C quantizes a block's keys per channel, which needs all of the block's rows, so the rows
// of a block being filled live here, one slot per block: [layer][kv_head][block_size][head_dim]
// F16. Attention reads a query's own block from its slot and earlier blocks from their codes;
// when a block's last row is written its keys are encoded per channel into the block and the
// slot is released. A slot is tied to a block id, not to a sequence:
//  * a row written at offset 0 starts the block afresh (a new holder's first write);
//  * a row written at offset > 0 of a block without a slot (its keys were encoded: a truncated
//    chat history, a block back from the host tier) starts from its decoded codes;
//  * copies and raw writes carry or drop the slot (Copy, Release);
//  * slots of blocks the cache has freed are dropped by ReleaseIf (Backend::ReleaseStaging).
// Slots are allocated when first needed and reused; memory follows the number of partially
// filled blocks. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cache/kv_spec.h"

namespace kvserve::cpu {

class KeyStaging {
 public:
  KeyStaging(const KvSpec& spec, int num_blocks);

  // Whether any (layer, head) of the spec keeps keys per channel; when not, nothing is staged.
  bool active() const { return active_; }
  bool has(int32_t id) const { return slot_of_[id] >= 0; }
  int filled(int32_t id) const { return slots_[slot_of_[id]].filled; }

  // Makes block `id` (whose bytes are `block`) ready for a row at `offset` (see above).
  void Prepare(int32_t id, int offset, const uint8_t* block);
  // The F16 key rows [block_size][head_dim] of (layer, head) of a staged block.
  uint16_t* rows(int32_t id, int layer, int head);
  const uint16_t* rows(int32_t id, int layer, int head) const;

  // Encodes the staged rows [0, filled) of every per-channel head of `layer` (all layers when
  // layer < 0) into the K segments of `block` (block_bytes of the spec's layout).
  void Encode(int32_t id, int layer, uint8_t* block) const;

  void Release(int32_t id);
  // dst takes a copy of src's slot, or loses its own when src has none.
  void Copy(int32_t src, int32_t dst);
  // Releases the slots of the blocks for which `freed` says true.
  void ReleaseIf(const std::function<bool(int32_t)>& freed);
  int num_slots_in_use() const { return static_cast<int>(slots_.size() - free_.size()); }

 private:
  struct Slot {
    std::vector<uint16_t> rows;  // [layer][kv_head][block_size][head_dim]
    int filled = 0;              // rows [0, filled) hold keys
  };
  int32_t Take(int32_t id);
  size_t RowsOffset(int layer, int head) const;

  const KvSpec spec_;
  bool active_ = false;
  std::vector<int32_t> slot_of_;  // [num_blocks], -1 = none
  std::vector<Slot> slots_;
  std::vector<int32_t> free_;     // unused slots
  std::vector<int32_t> staged_;   // blocks holding a slot (ReleaseIf walks these)
  mutable std::vector<float> scratch_;  // [block_size][head_dim]
};

}  // namespace kvserve::cpu
