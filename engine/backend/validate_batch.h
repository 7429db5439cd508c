// The checks every backend makes before it follows a ForwardBatch's indices: sizes against
// the backend's limits, token ids against the vocabulary, slots, block-table entries and
// positions against the KV pool, no slot written by two tokens (on the GPU they would race),
// logits rows against the tokens. Header-only so the CUDA
// library (which does not link the CPU backend) shares it.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/forward_batch.h"

namespace kvserve {

// INVALID_ARGUMENT naming the first problem; OK when every index is in range. Slots are
// written into blocks [0, num_blocks); tables may also list the compaction region's blocks
// [num_blocks, num_blocks + num_compact_blocks), which are only read.
[[nodiscard]] inline Status ValidateForwardBatch(const ForwardBatch& b, const BackendLimits& lim, int vocab_size,
                                                 int num_blocks, int block_size, int num_compact_blocks = 0) {
  const int T = b.num_tokens();
  const int S = b.num_seqs();
  if (T <= 0 || T > lim.max_num_tokens) {
    return InvalidArgumentError(fmt::format("batch of {} tokens outside [1, {}]", T, lim.max_num_tokens));
  }
  if (S <= 0 || S > lim.max_num_seqs || b.num_logits() > lim.max_logits) {
    return InvalidArgumentError("batch has too many sequences or logits rows");
  }
  if (b.positions.size() != static_cast<size_t>(T) || b.slot_mapping.size() != static_cast<size_t>(T) ||
      b.query_start.size() != static_cast<size_t>(S + 1) || b.query_start[0] != 0 || b.query_start[S] != T ||
      b.max_blocks_per_seq < 0 || b.block_tables.size() != static_cast<size_t>(S) * b.max_blocks_per_seq) {
    return InvalidArgumentError("batch arrays have inconsistent sizes");
  }
  const int bs = block_size;
  for (int i = 0; i < T; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= vocab_size) {
      return InvalidArgumentError(fmt::format("token id {} outside the vocabulary", b.token_ids[i]));
    }
    if (b.slot_mapping[i] < 0 || b.slot_mapping[i] >= static_cast<int64_t>(num_blocks) * bs) {
      return InvalidArgumentError(fmt::format("slot {} outside the KV cache", b.slot_mapping[i]));
    }
  }
  for (int s = 0; s < S; ++s) {
    if (b.query_start[s + 1] <= b.query_start[s]) return InvalidArgumentError("empty sequence in batch");
    const int last = b.positions[b.query_start[s + 1] - 1];
    if (b.seq_lens[s] != last + 1 || b.seq_lens[s] > b.max_blocks_per_seq * bs) {
      return InvalidArgumentError("sequence length does not match positions or block table");
    }
    for (int j = 0; j < (b.seq_lens[s] + bs - 1) / bs; ++j) {
      const int32_t block = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + j];
      if (block < 0 || block >= num_blocks + num_compact_blocks) {
        return InvalidArgumentError(fmt::format("block table entry {} out of range", block));
      }
    }
    for (int i = b.query_start[s]; i < b.query_start[s + 1]; ++i) {
      if (b.positions[i] < 0 || b.positions[i] > last) return InvalidArgumentError("bad position");
    }
  }
  // Sorted in a per-thread buffer (no allocation once it has grown to the batch size).
  static thread_local std::vector<int64_t> sorted_slots;
  sorted_slots.assign(b.slot_mapping.begin(), b.slot_mapping.end());
  std::sort(sorted_slots.begin(), sorted_slots.end());
  if (auto dup = std::adjacent_find(sorted_slots.begin(), sorted_slots.end()); dup != sorted_slots.end()) {
    return InvalidArgumentError(fmt::format("slot {} is written by two tokens of the batch", *dup));
  }
  if (b.num_logits() > T) return InvalidArgumentError("more logits rows than tokens");
  for (int32_t idx : b.logits_indices) {
    if (idx < 0 || idx >= T) return InvalidArgumentError("logits index out of range");
  }
  return OkStatus();
}

}  // namespace kvserve
