// Scheduler: decides, every step, which sequences run and how many of their tokens, under a
// token budget (max_num_batched_tokens), a sequence limit (max_num_seqs, which is also the
// number of logits rows a step may produce) and the KV budget.
//
// There are no prefill/decode phases: running sequences come first (one decode token each, or
// the next chunk of a long prompt), then swapped-out sequences are brought back, then waiting
// ones are admitted in order of (aged priority, arrival) with their prompts chunked to fit. A
// sequence is admitted only if the cache can hold its chunk. When a running sequence cannot
// grow, idle memory is reclaimed first (chat sessions), then waiting sequences that hold
// blocks give them up, then the lowest-priority, most recently arrived running sequence is
// preempted (recompute, or swap to the host tier).
//
// Aging: a sequence's effective priority is its priority minus (seconds waited /
// aging_horizon_seconds) * (kMaxPriority - kMinPriority), so one that has waited the horizon
// is ahead of every later arrival whatever their priorities: nobody starves.
//
// Logits rows: a chunk needs one row per position from Sequence::first_logits_position() on
// (one row when it reaches the end of the tokens; one per prompt position for prompt
// logprobs); the rows of a step never exceed max_num_seqs, so chunks are cut to fit.
//
// The scheduler reads and changes only the KV cache's bookkeeping; the byte movements this
// implies (swaps, copy-on-write copies, key re-rotation after window eviction) are returned
// in `block_ops`, in the order they must run before the forward pass (each op depends only on
// ops before it: a sequence's window copies and key shifts come before its own swap-out).
// Ops of a sequence preempted by recompute in the same step are dropped (its blocks are
// free). Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/sequence.h"

namespace kvserve {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  bool preempt_by_swap = false;
  double aging_horizon_seconds = 60.0;
};

struct ScheduledWork {
  Sequence* seq = nullptr;
  int num_new_tokens = 0;
  int num_logits = 0;  // logits rows: for the last num_logits of the new tokens
};

// One byte movement on the backend's KV storage.
struct BlockOp {
  enum class Kind { kSwapOut, kSwapIn, kCopy, kShiftKeys };
  Kind kind = Kind::kCopy;
  Sequence* seq = nullptr;                          // whose cache it moves (fails with it)
  KvCacheManager::SwapPlan swap;                    // kSwapOut (device -> host), kSwapIn
  std::vector<std::pair<BlockId, BlockId>> copies;  // kCopy: (src, dst)
  std::vector<BlockId> blocks;                      // kShiftKeys: re-rotate by `delta`
  int delta = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledWork> work;
  std::vector<Sequence*> preempted;
  std::vector<BlockOp> block_ops;  // run in order before the forward pass
  int num_batched_tokens = 0;
  int num_logits = 0;
  bool empty() const { return work.empty(); }
};

class Scheduler {
 public:
  // `reclaim_idle_memory` frees one idle holder of blocks (a chat session) and returns false
  // when there is none. REQUIRES: cache outlives the scheduler.
  Scheduler(const SchedulerConfig& config, KvCacheManager* cache,
            std::function<bool()> reclaim_idle_memory);

  // A new (or resumed) sequence waits for admission. It may already hold cache (a chat
  // session's, or an n > 1 choice forked while the running set was full).
  void AddWaiting(Sequence* seq);
  // A sequence that already holds its cache (n > 1 children) joins the running set.
  // REQUIRES: has_running_room().
  void AddRunning(Sequence* seq);
  // Forgets a finished or aborted sequence (the engine frees its cache).
  void Remove(Sequence* seq);

  [[nodiscard]] SchedulerOutput Schedule();

  bool has_running_room() const { return num_running() < config_.max_num_seqs; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  // Tokens of `seq` that may run this step within the token budget and `rows` logits rows;
  // *num_logits receives the rows they need.
  int ChunkFor(const Sequence& seq, int budget, int rows, int* num_logits) const;
  // Evicts for the sliding window and reserves slots; when short, reclaims idle memory, then
  // the caches that waiting sequences hold.
  bool Reserve(Sequence* seq, int num_new, SchedulerOutput* out);
  // A waiting sequence that holds blocks (a chat session's history, a forked choice) gives
  // them up, the lowest-priority one first and never `except`: swapped to the host tier when
  // preemption swaps, else freed for recompute. Counted as a preemption. False when none.
  bool ReleaseWaitingCache(const Sequence* except, SchedulerOutput* out);
  void Preempt(Sequence* victim, SchedulerOutput* out);
  void Schedule(Sequence* seq, int n, int num_logits, SchedulerOutput* out);
  // Sort key: effective priority (aged), then arrival.
  bool Before(const Sequence* a, const Sequence* b, Clock::time_point now) const;
  void SortByPriority(std::vector<Sequence*>* seqs) const;

  SchedulerConfig config_;
  KvCacheManager* cache_;
  std::function<bool()> reclaim_idle_memory_;
  std::vector<Sequence*> running_;
  std::vector<Sequence*> waiting_;
  std::vector<Sequence*> swapped_;
  int64_t preemptions_ = 0;
};

}  // namespace kvserve
