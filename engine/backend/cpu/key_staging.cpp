#include "engine/backend/cpu/key_staging.h"

#include <algorithm>

#include "cache/kv_codec.h"
#include "common/check.h"
#include "common/fp16.h"

namespace kvserve::cpu {

KeyStaging::KeyStaging(const KvSpec& spec, int num_blocks)
    : spec_(spec), active_(spec.staging_bytes() > 0), slot_of_(static_cast<size_t>(num_blocks), -1) {
  scratch_.resize(static_cast<size_t>(spec.block_size()) * spec.head_dim());
}

size_t KeyStaging::RowsOffset(int layer, int head) const {
  return (static_cast<size_t>(layer) * spec_.num_kv_heads() + head) * spec_.block_size() * spec_.head_dim();
}

uint16_t* KeyStaging::rows(int32_t id, int layer, int head) {
  DCHECK(has(id));
  return slots_[slot_of_[id]].rows.data() + RowsOffset(layer, head);
}

const uint16_t* KeyStaging::rows(int32_t id, int layer, int head) const {
  DCHECK(has(id));
  return slots_[slot_of_[id]].rows.data() + RowsOffset(layer, head);
}

int32_t KeyStaging::Take(int32_t id) {
  if (slot_of_[id] >= 0) return slot_of_[id];
  int32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<int32_t>(slots_.size());
    slots_.emplace_back();
    slots_.back().rows.resize(spec_.staging_bytes() / sizeof(uint16_t));
  }
  slots_[slot].filled = 0;
  slot_of_[id] = slot;
  staged_.push_back(id);
  return slot;
}

void KeyStaging::Prepare(int32_t id, int offset, const uint8_t* block) {
  const bool had = has(id);
  Slot& slot = slots_[Take(id)];
  if (offset == 0) {
    slot.filled = 0;
  } else if (!had) {
    // The block's keys were encoded per channel: continue from what its codes say.
    const int hd = spec_.head_dim();
    std::vector<float> row(hd);
    for (int l = 0; l < spec_.num_layers(); ++l) {
      for (int h = 0; h < spec_.num_kv_heads(); ++h) {
        if (!KeysPerChannel(spec_.dtype(l, h))) continue;
        const uint8_t* seg = block + spec_.segment_offset(l, 0, h);
        const uint16_t* params = reinterpret_cast<const uint16_t*>(seg + spec_.scales_offset(l, h));
        uint16_t* out = rows(id, l, h);
        for (int r = 0; r < offset; ++r) {
          DecodeKvKeyRowPerChannel(seg + r * spec_.row_bytes(l, h), params, hd, spec_.group_size(), row.data());
          for (int i = 0; i < hd; ++i) out[static_cast<size_t>(r) * hd + i] = F32ToF16(row[i]);
        }
      }
    }
    slot.filled = offset;
  }
  slot.filled = std::max(slot.filled, offset + 1);
}

void KeyStaging::Encode(int32_t id, int layer, uint8_t* block) const {
  const int n = filled(id);
  const int hd = spec_.head_dim();
  for (int l = layer < 0 ? 0 : layer; l < (layer < 0 ? spec_.num_layers() : layer + 1); ++l) {
    for (int h = 0; h < spec_.num_kv_heads(); ++h) {
      if (!KeysPerChannel(spec_.dtype(l, h))) continue;
      const uint16_t* in = rows(id, l, h);
      for (size_t i = 0; i < static_cast<size_t>(n) * hd; ++i) scratch_[i] = F16ToF32(in[i]);
      uint8_t* seg = block + spec_.segment_offset(l, 0, h);
      EncodeKvKeysPerChannel(scratch_.data(), n, hd, spec_.group_size(), seg,
                             reinterpret_cast<uint16_t*>(seg + spec_.scales_offset(l, h)));
    }
  }
}

void KeyStaging::Release(int32_t id) {
  const int32_t slot = slot_of_[id];
  if (slot < 0) return;
  slot_of_[id] = -1;
  free_.push_back(slot);
  staged_.erase(std::find(staged_.begin(), staged_.end(), id));
}

void KeyStaging::Copy(int32_t src, int32_t dst) {
  if (src == dst) return;
  if (!has(src)) {
    Release(dst);
    return;
  }
  Take(dst);
  slots_[slot_of_[dst]].rows = slots_[slot_of_[src]].rows;
  slots_[slot_of_[dst]].filled = slots_[slot_of_[src]].filled;
}

void KeyStaging::ReleaseIf(const std::function<bool(int32_t)>& freed) {
  std::vector<int32_t> drop;
  for (int32_t id : staged_) {
    if (freed(id)) drop.push_back(id);
  }
  for (int32_t id : drop) Release(id);
}

}  // namespace kvserve::cpu
