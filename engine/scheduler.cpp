#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

namespace kvserve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* cache,
                     std::function<bool()> reclaim_idle_memory)
    : config_(config), cache_(cache), reclaim_idle_memory_(std::move(reclaim_idle_memory)) {}

void Scheduler::AddWaiting(Sequence* seq) {
  seq->state = SeqState::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::AddRunning(Sequence* seq) {
  seq->state = SeqState::kRunning;
  running_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  for (std::vector<Sequence*>* list : {&running_, &waiting_, &swapped_}) {
    list->erase(std::remove(list->begin(), list->end(), seq), list->end());
  }
}

bool Scheduler::Before(const Sequence* a, const Sequence* b, Clock::time_point now) const {
  auto effective = [&](const Sequence* s) {
    const double waited = std::chrono::duration<double>(now - s->request->submitted).count();
    return s->request->priority() - std::floor(waited / config_.aging_seconds);
  };
  const double pa = effective(a), pb = effective(b);
  if (pa != pb) return pa < pb;
  if (a->request->arrival != b->request->arrival) return a->request->arrival < b->request->arrival;
  return a->choice < b->choice;
}

void Scheduler::SortByPriority(std::vector<Sequence*>* seqs) const {
  const Clock::time_point now = Clock::now();
  std::stable_sort(seqs->begin(), seqs->end(),
                   [&](const Sequence* a, const Sequence* b) { return Before(a, b, now); });
}

int Scheduler::ChunkFor(const Sequence& seq, int budget) const {
  int n = std::min(seq.num_uncomputed(), budget);
  if (seq.window.sliding()) {
    // Leave room in the window for the chunk after evicting down to sinks + recent blocks.
    const int bs = cache_->block_size();
    const int sink_span = (seq.window.sink_tokens + bs - 1) / bs * bs;
    n = std::min(n, std::max(1, seq.window.window_tokens - sink_span - bs));
  }
  return n;
}

bool Scheduler::Reserve(Sequence* seq, int num_new, SchedulerOutput* out) {
  if (seq->window.sliding() && cache_->Contains(seq->id)) {
    KvCacheManager::WindowEviction ev = cache_->EvictForWindow(seq->id, seq->window, num_new);
    if (ev.evicted_tokens > 0) {
      seq->num_evicted += ev.evicted_tokens;
      // Shared blocks that would be re-rotated get private copies first.
      out->block_copies.insert(out->block_copies.end(), ev.copies.begin(), ev.copies.end());
      if (!ev.shifted_blocks.empty()) out->key_shifts.push_back({std::move(ev.shifted_blocks), -ev.evicted_tokens});
    }
  }
  while (true) {
    if (cache_->AllocateSlots(seq->id, num_new).has_value()) {
      seq->holds_cache = true;
      return true;
    }
    if (!reclaim_idle_memory_ || !reclaim_idle_memory_()) return false;
  }
}

void Scheduler::Preempt(Sequence* victim, SchedulerOutput* out) {
  ++preemptions_;
  ++victim->request->usage.preemptions;
  out->preempted.push_back(victim);
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  if (config_.preempt_by_swap) {
    if (std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapOut(victim->id)) {
      out->swap_out.push_back(std::move(*plan));
      victim->state = SeqState::kSwapped;
      swapped_.push_back(victim);
      return;
    }
  }
  // Recompute: drop the cache; the sequence re-prefills everything it has (prompt and the
  // tokens generated so far), so greedy output continues exactly as before.
  cache_->Free(victim->id, EvictionReason::kPreemption);
  victim->holds_cache = false;
  victim->num_computed = 0;
  victim->num_evicted = 0;
  AddWaiting(victim);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  SortByPriority(&running_);

  // 1. Running sequences: decode tokens and continuing prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int n = ChunkFor(*seq, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool reserved = Reserve(seq, n, &out);
    while (!reserved) {
      // Preempt from the back (lowest priority, latest); never a sequence already scheduled.
      Sequence* victim = running_.back();
      Preempt(victim, &out);
      if (victim == seq) break;
      reserved = Reserve(seq, n, &out);
    }
    if (!reserved) continue;  // seq itself was preempted; running_[i] is now the next one
    out.work.push_back({seq, n});
    out.num_batched_tokens += n;
    budget -= n;
    ++i;
  }
  if (!out.preempted.empty()) return out;  // memory is short: admit nothing new this step

  // 2. Swapped-out sequences come back before anything new is admitted.
  SortByPriority(&swapped_);
  while (!swapped_.empty() && budget > 0 && num_running() < config_.max_num_seqs) {
    Sequence* seq = swapped_.front();
    std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapIn(seq->id);
    if (!plan) break;
    out.swap_in.push_back(std::move(*plan));
    swapped_.erase(swapped_.begin());
    seq->state = SeqState::kRunning;
    running_.push_back(seq);
    const int n = ChunkFor(*seq, budget);
    if (n > 0 && Reserve(seq, n, &out)) {
      out.work.push_back({seq, n});
      out.num_batched_tokens += n;
      budget -= n;
    }
  }

  // 3. Waiting sequences, by aged priority then arrival.
  SortByPriority(&waiting_);
  while (!waiting_.empty() && budget > 0 && num_running() < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const bool had_cache = seq->holds_cache;  // a chat session's cache it resumed
    if (!had_cache) {
      seq->num_computed = cache_->AcquireCachedPrefix(seq->id, seq->tokens, seq->request->params.cache_salt);
      seq->holds_cache = true;
    }
    const int n = ChunkFor(*seq, budget);
    if (!Reserve(seq, n, &out)) {
      if (!had_cache) {  // give the prefix blocks back: a waiting request holds nothing
        cache_->Free(seq->id);
        seq->holds_cache = false;
        seq->num_computed = 0;
      }
      break;
    }
    waiting_.erase(waiting_.begin());
    seq->state = SeqState::kRunning;
    running_.push_back(seq);
    out.work.push_back({seq, n});
    out.num_batched_tokens += n;
    budget -= n;
  }
  return out;
}

}  // namespace kvserve
