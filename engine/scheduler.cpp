#include "engine/scheduler.h"

#include <algorithm>

namespace kvserve {
namespace {

BlockOp MakeOp(BlockOp::Kind kind, Sequence* seq) {
  BlockOp op;
  op.kind = kind;
  op.seq = seq;
  return op;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* cache,
                     std::function<bool()> reclaim_idle_memory)
    : config_(config), cache_(cache), reclaim_idle_memory_(std::move(reclaim_idle_memory)) {}

void Scheduler::AddWaiting(Sequence* seq) {
  seq->state = SeqState::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::AddRunning(Sequence* seq) {
  CHECK(has_running_room()) << "the running set is full (max_num_seqs " << config_.max_num_seqs << ")";
  seq->state = SeqState::kRunning;
  running_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  for (std::vector<Sequence*>* list : {&running_, &waiting_, &swapped_}) {
    list->erase(std::remove(list->begin(), list->end(), seq), list->end());
  }
}

bool Scheduler::Before(const Sequence* a, const Sequence* b, Clock::time_point now) const {
  constexpr double kRange = kMaxPriority - kMinPriority;
  auto effective = [&](const Sequence* s) {
    const double waited = std::chrono::duration<double>(now - s->request->submitted).count();
    return s->request->priority() - waited / config_.aging_horizon_seconds * kRange;
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

int Scheduler::ChunkFor(const Sequence& seq, int budget, int rows, int* num_logits) const {
  int n = std::min(seq.num_uncomputed(), budget);
  if (seq.window.sliding()) {
    // Leave room in the window for the chunk after evicting down to sinks + recent blocks.
    const int bs = cache_->block_size();
    const int sink_span = (seq.window.sink_tokens + bs - 1) / bs * bs;
    n = std::min(n, std::max(1, seq.window.window_tokens - sink_span - bs));
  }
  // Rows for the chunk's positions from the first one whose logits are wanted.
  const int start = seq.num_computed;
  const int first = std::max(start, seq.first_logits_position());
  int need = std::max(0, start + n - first);
  if (need > rows) {
    n = first - start + rows;  // stop the chunk where the rows run out
    need = rows;
  }
  *num_logits = need;
  return n;
}

bool Scheduler::Reserve(Sequence* seq, int num_new, SchedulerOutput* out) {
  if (seq->window.sliding() && cache_->Contains(seq->id)) {
    KvCacheManager::WindowEviction ev = cache_->EvictForWindow(seq->id, seq->window, num_new);
    if (ev.evicted_tokens > 0) {
      seq->num_evicted += ev.evicted_tokens;
      // Shared blocks that would be re-rotated get private copies first.
      if (!ev.copies.empty()) {
        BlockOp copy = MakeOp(BlockOp::Kind::kCopy, seq);
        copy.copies = std::move(ev.copies);
        out->block_ops.push_back(std::move(copy));
      }
      if (!ev.shifted_blocks.empty()) {
        BlockOp shift = MakeOp(BlockOp::Kind::kShiftKeys, seq);
        shift.blocks = std::move(ev.shifted_blocks);
        shift.delta = -ev.evicted_tokens;
        out->block_ops.push_back(std::move(shift));
      }
    }
  }
  while (true) {
    if (cache_->AllocateSlots(seq->id, num_new).has_value()) {
      seq->holds_cache = true;
      return true;
    }
    if (reclaim_idle_memory_ && reclaim_idle_memory_()) continue;
    if (!ReleaseWaitingCache(seq, out)) return false;
  }
}

bool Scheduler::ReleaseWaitingCache(const Sequence* except, SchedulerOutput* out) {
  for (auto it = waiting_.rbegin(); it != waiting_.rend(); ++it) {
    Sequence* victim = *it;
    if (victim == except || !victim->holds_cache) continue;
    ++preemptions_;
    ++victim->request->usage.preemptions;
    out->preempted.push_back(victim);
    if (config_.preempt_by_swap) {
      if (std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapOut(victim->id)) {
        BlockOp swap = MakeOp(BlockOp::Kind::kSwapOut, victim);
        swap.swap = std::move(*plan);
        out->block_ops.push_back(std::move(swap));
        waiting_.erase(std::next(it).base());
        victim->state = SeqState::kSwapped;
        swapped_.push_back(victim);
        return true;
      }
    }
    cache_->Free(victim->id, EvictionReason::kPreemption);
    victim->holds_cache = false;
    victim->num_computed = 0;
    victim->num_evicted = 0;
    return true;
  }
  return false;
}

void Scheduler::Preempt(Sequence* victim, SchedulerOutput* out) {
  ++preemptions_;
  ++victim->request->usage.preemptions;
  out->preempted.push_back(victim);
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  if (config_.preempt_by_swap) {
    if (std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapOut(victim->id)) {
      // After the victim's own copies and shifts of this step (already in block_ops).
      BlockOp swap = MakeOp(BlockOp::Kind::kSwapOut, victim);
      swap.swap = std::move(*plan);
      out->block_ops.push_back(std::move(swap));
      victim->state = SeqState::kSwapped;
      swapped_.push_back(victim);
      return;
    }
  }
  // Recompute: drop the cache; the sequence re-prefills everything it has (prompt and the
  // tokens generated so far), so greedy output continues exactly as before. Byte movements
  // planned for it this step would land in blocks that are free now: drop them.
  std::erase_if(out->block_ops, [victim](const BlockOp& op) { return op.seq == victim; });
  cache_->Free(victim->id, EvictionReason::kPreemption);
  victim->holds_cache = false;
  victim->num_computed = 0;
  victim->num_evicted = 0;
  AddWaiting(victim);
}

void Scheduler::Schedule(Sequence* seq, int n, int num_logits, SchedulerOutput* out) {
  out->work.push_back({seq, n, num_logits});
  out->num_batched_tokens += n;
  out->num_logits += num_logits;
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  SortByPriority(&running_);
  auto rows_left = [&] { return config_.max_num_seqs - out.num_logits; };

  // 1. Running sequences: decode tokens and continuing prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    int num_logits = 0;
    const int n = ChunkFor(*seq, budget, rows_left(), &num_logits);
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
    Schedule(seq, n, num_logits, &out);
    budget -= n;
    ++i;
  }
  if (!out.preempted.empty()) return out;  // memory is short: admit nothing new this step

  // 2. Swapped-out sequences come back before anything new is admitted.
  SortByPriority(&swapped_);
  while (!swapped_.empty() && budget > 0 && has_running_room()) {
    Sequence* seq = swapped_.front();
    std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapIn(seq->id);
    // Idle sessions make room for it as they do for running sequences.
    while (!plan && reclaim_idle_memory_ && reclaim_idle_memory_()) plan = cache_->SwapIn(seq->id);
    if (!plan) break;
    BlockOp swap = MakeOp(BlockOp::Kind::kSwapIn, seq);
    swap.swap = std::move(*plan);
    out.block_ops.push_back(std::move(swap));
    swapped_.erase(swapped_.begin());
    seq->state = SeqState::kRunning;
    running_.push_back(seq);
    int num_logits = 0;
    const int n = ChunkFor(*seq, budget, rows_left(), &num_logits);
    if (n > 0 && Reserve(seq, n, &out)) {
      Schedule(seq, n, num_logits, &out);
      budget -= n;
    }
  }

  // 3. Waiting sequences, by aged priority then arrival.
  SortByPriority(&waiting_);
  while (!waiting_.empty() && budget > 0 && has_running_room()) {
    Sequence* seq = waiting_.front();
    const bool had_cache = seq->holds_cache;  // a chat session's cache, or a forked choice's
    if (!had_cache) {
      seq->num_computed = seq->reads_prefix_cache() ? cache_->AcquireCachedPrefix(
                                                          seq->id, seq->tokens, seq->request->params.cache_salt)
                                                    : 0;
      seq->holds_cache = true;
    }
    int num_logits = 0;
    const int n = ChunkFor(*seq, budget, rows_left(), &num_logits);
    if (n <= 0 || !Reserve(seq, n, &out)) {
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
    Schedule(seq, n, num_logits, &out);
    budget -= n;
  }
  return out;
}

}  // namespace kvserve
