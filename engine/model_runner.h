// ModelRunner: executes one engine step on the backend. It runs the scheduler's byte
// movements (swaps to and from the host tier, copy-on-write copies, key re-rotation after a
// window eviction) in order, then turns the scheduled sequences into a ForwardBatch (flat
// token ids, positions, slot mapping, padded block tables) and runs the forward pass. A
// failed movement and a failed forward pass take the same path: the step's status and the
// requests it leaves with caches or outputs that are not what the bookkeeping says.
//
// The runner reads block tables from the KvCacheManager (it is the one engine piece that sees
// block ids besides the manager) and never changes them: the scheduler has already reserved
// the slots with AllocateSlots. Its arrays are reused between steps. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/scheduler.h"

namespace kvserve {

// One sequence's share of a forward pass: `tokens` occupy cache positions
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
  ModelRunner(Backend* backend, KvCacheManager* cache, int vocab_size, Profiler* profiler = nullptr);

  // Test hook (EngineTestHooks::fail_forward): called before each forward pass of
  // ExecuteStep with its index (0, 1, ..., counting failed steps too); true fails the pass.
  void set_fail_forward(std::function<bool(int64_t forward_index)> hook) { fail_forward_ = std::move(hook); }

  // One engine step: out.block_ops in order, then the forward pass over out.work (none when
  // there is no work). `logits` receives [out.num_logits][vocab] in work order. On an error,
  // *failed receives the requests to fail: for a failed movement, those of that op and every
  // later op, and every request with work in the step; for a failed forward pass, every
  // request with work in the step.
  [[nodiscard]] Status ExecuteStep(const SchedulerOutput& out, std::span<float> logits,
                                   std::vector<Request*>* failed);
  // The forward pass alone. `logits` receives [sum of num_logits][vocab] in `seqs` order.
  [[nodiscard]] Status Execute(std::span<const ScheduledSeq> seqs, std::span<float> logits);

  // Byte movements, also for chat sessions (offload, restore) and forked choices.
  [[nodiscard]] Status CopyBlocks(std::span<const std::pair<BlockId, BlockId>> src_dst);
  [[nodiscard]] Status MoveSwapBlocks(const KvCacheManager::SwapPlan& plan, bool to_host);

 private:
  [[nodiscard]] Status Apply(const BlockOp& op);

  Backend* backend_;
  KvCacheManager* cache_;
  int vocab_size_;
  Profiler* profiler_;
  std::function<bool(int64_t)> fail_forward_;
  int64_t num_steps_ = 0;  // ExecuteStep calls that moved bytes or ran a forward pass
  std::vector<ScheduledSeq> seqs_;
  std::vector<Backend::BlockTransfer> transfers_;
  std::vector<int32_t> token_ids_, positions_, query_start_, seq_lens_, block_tables_, logits_indices_;
  std::vector<int64_t> slot_mapping_;
  ForwardBatch batch_;
};

}  // namespace kvserve
