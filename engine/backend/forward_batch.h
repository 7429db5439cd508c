// ForwardBatch: one engine step's work as flat integer arrays — the whole contract between
// the model runner (which owns the cache bookkeeping) and a backend (which owns the bytes).
//
// Tokens of all sequences are concatenated: sequence s owns tokens
// [query_start[s], query_start[s+1]). Token i is written to the KV cache at slot_mapping[i]
// (= block id * block_size + offset) and sits at cache position positions[i]; it attends to
// cache positions [0, positions[i]] of its sequence, read through the sequence's row of
// block_tables. seq_lens[s] = positions of the sequence's last token + 1. Rows listed in
// logits_indices produce logits, in that order. Plain views; the runner keeps the storage
// alive for the duration of Forward.
#pragma once

#include <cstdint>
#include <span>

namespace kvserve {

struct ForwardBatch {
  // Per token, [num_tokens].
  std::span<const int32_t> token_ids;
  std::span<const int32_t> positions;
  std::span<const int64_t> slot_mapping;
  // Per sequence.
  std::span<const int32_t> query_start;   // [num_seqs + 1], query_start[0] == 0
  std::span<const int32_t> seq_lens;      // [num_seqs]
  std::span<const int32_t> block_tables;  // [num_seqs][max_blocks_per_seq], -1 padded
  int max_blocks_per_seq = 0;
  // Token rows whose logits are wanted, [num_logits].
  std::span<const int32_t> logits_indices;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_logits() const { return static_cast<int>(logits_indices.size()); }
};

}  // namespace kvserve
