// Scheduler: decides, every step, which sequences run and how many of their tokens, under a
// token budget (max_num_batched_tokens), a sequence limit (max_num_seqs) and the KV budget.
//
// There are no prefill/decode phases: running sequences come first (one decode token each, or
// the next chunk of a long prompt), then swapped-out sequences are brought back, then waiting
// ones are admitted in order of (priority, arrival) with their prompts chunked to fit. A
// sequence is admitted only if the cache can hold its chunk. When a running sequence cannot
// grow, idle memory is reclaimed first (chat sessions), then the lowest-priority, most
// recently arrived running sequence is preempted (recompute, or swap to the host tier).
// Waiting requests age (one priority level per `aging_seconds`) so none starves.
//
// The scheduler reads and changes only the KV cache's bookkeeping; byte movements (swaps,
// key re-rotation after window eviction) are returned for the engine to perform before the
// forward pass. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/sequence.h"

namespace kvserve {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  bool preempt_by_swap = false;
  double aging_seconds = 5.0;
};

struct ScheduledWork {
  Sequence* seq = nullptr;
  int num_new_tokens = 0;
};

struct KeyShift {
  std::vector<BlockId> blocks;
  int delta = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledWork> work;
  std::vector<Sequence*> preempted;
  std::vector<KvCacheManager::SwapPlan> swap_out;  // copy device -> host before anything else
  std::vector<KvCacheManager::SwapPlan> swap_in;   // then host -> device
  std::vector<std::pair<BlockId, BlockId>> block_copies;  // then copy-on-write copies
  std::vector<KeyShift> key_shifts;                // then re-rotate keys after window eviction
  int num_batched_tokens = 0;
  bool empty() const { return work.empty(); }
};

class Scheduler {
 public:
  // `reclaim_idle_memory` frees one idle holder of blocks (a chat session) and returns false
  // when there is none. REQUIRES: cache outlives the scheduler.
  Scheduler(const SchedulerConfig& config, KvCacheManager* cache,
            std::function<bool()> reclaim_idle_memory);

  // A new (or resumed) sequence waits for admission.
  void AddWaiting(Sequence* seq);
  // A sequence that already holds its cache (n > 1 children) joins the running set.
  void AddRunning(Sequence* seq);
  // Forgets a finished or aborted sequence (the engine frees its cache).
  void Remove(Sequence* seq);

  [[nodiscard]] SchedulerOutput Schedule();

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  // Tokens of `seq` that may run this step within `budget`.
  int ChunkFor(const Sequence& seq, int budget) const;
  // Evicts for the sliding window and reserves slots; reclaims idle memory when short.
  bool Reserve(Sequence* seq, int num_new, SchedulerOutput* out);
  void Preempt(Sequence* victim, SchedulerOutput* out);
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
