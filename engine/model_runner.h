// ModelRunner: turns one step's scheduled sequences into a ForwardBatch (flat token ids,
// positions, slot mapping, padded block tables) and runs the backend.
//
// The runner reads block tables from the KvCacheManager (it is the one engine piece that sees
// block ids besides the manager) and never changes them: the scheduler has already reserved
// the slots with AllocateSlots. Its arrays are reused between steps. Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "common/status.h"
#include "engine/backend/backend.h"

namespace kvserve {

// One sequence's share of a step: `tokens` occupy cache positions
// [start_position, start_position + tokens.size()), whose slots the manager has reserved.
struct ScheduledSeq {
  SeqId seq = 0;
  std::span<const int32_t> tokens;
  int start_position = 0;
  int num_logits = 0;  // logits of the last num_logits tokens (end of prefill or decode: 1;
                       // prompt logprobs: every prompt position)
};

class ModelRunner {
 public:
  // REQUIRES: backend and cache outlive the runner.
  ModelRunner(Backend* backend, const KvCacheManager* cache, int vocab_size, Profiler* profiler = nullptr);

  // Runs the step. `logits` receives [sum of num_logits][vocab] in schedule order.
  [[nodiscard]] Status Execute(std::span<const ScheduledSeq> seqs, std::span<float> logits);

 private:
  Backend* backend_;
  const KvCacheManager* cache_;
  int vocab_size_;
  Profiler* profiler_;
  std::vector<int32_t> token_ids_, positions_, query_start_, seq_lens_, block_tables_, logits_indices_;
  std::vector<int64_t> slot_mapping_;
  ForwardBatch batch_;
};

}  // namespace kvserve
