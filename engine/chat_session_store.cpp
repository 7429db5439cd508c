#include "engine/chat_session_store.h"

#include <algorithm>

#include "common/log.h"

namespace kvserve {

ChatSessionStore::ChatSessionStore(const ChatSessionConfig& config, KvCacheManager* cache, const Tokenizer* tokenizer,
                                   std::function<SeqId()> next_seq_id, ByteMover mover)
    : config_(config),
      cache_(cache),
      tokenizer_(tokenizer),
      next_seq_id_(std::move(next_seq_id)),
      mover_(std::move(mover)) {}

bool ChatSessionStore::TruncateCache(SeqId seq, int num_tokens) {
  if (num_tokens >= cache_->table(seq).num_tokens()) return true;
  std::optional<std::vector<std::pair<BlockId, BlockId>>> copies = cache_->Truncate(seq, num_tokens);
  return copies && (copies->empty() || mover_.copy(*copies).ok());
}

std::string ChatSessionStore::Key(const std::string& tenant, const std::string& id) {
  return std::to_string(tenant.size()) + ":" + tenant + id;
}

void ChatSessionStore::ReleaseCache(ChatSession* s, bool count_eviction) {
  if (!s->has_cache) return;
  if (count_eviction) {
    cache_->Free(s->cache_seq, EvictionReason::kSession);
  } else {
    cache_->Free(s->cache_seq);
  }
  s->has_cache = false;
  s->swapped = false;
  s->tokens.clear();
  s->generated.clear();
  s->num_evicted = 0;
}

void ChatSessionStore::DropLruWhile(const std::function<bool()>& over_limit, const std::string& tenant) {
  while (over_limit()) {
    ChatSession* lru = nullptr;
    for (auto& [id, s] : sessions_) {
      if (s.in_use || (!tenant.empty() && s.tenant != tenant)) continue;
      if (lru == nullptr || s.last_used < lru->last_used) lru = &s;
    }
    if (lru == nullptr) return;
    Evict(lru);
    sessions_.erase(Key(lru->tenant, lru->id));
  }
}

Status ChatSessionStore::Attach(const std::string& tenant, const std::string& id, Sequence* seq, bool wait_for_disk) {
  const std::string key = Key(tenant, id);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) {
    DropLruWhile([&] {
      int n = 0;
      for (const auto& [sid, s] : sessions_) n += s.tenant == tenant;
      return n >= config_.max_per_tenant;
    }, tenant);
    DropLruWhile([&] { return static_cast<int>(sessions_.size()) >= config_.max_sessions; }, "");
    if (static_cast<int>(sessions_.size()) >= config_.max_sessions) {
      return ResourceExhaustedError("too many active chat sessions");
    }
    ChatSession s;
    s.id = id;
    s.tenant = tenant;
    it = sessions_.emplace(key, std::move(s)).first;
  }
  ChatSession& s = it->second;
  if (s.in_use) return FailedPreconditionError("the chat session is busy with another request");
  const bool on_disk_ready = s.has_cache || !DiskReadPending(s);
  if (!on_disk_ready && wait_for_disk) return UnavailableError("the chat session's cache is being read from disk");
  s.in_use = true;
  s.last_used = Clock::now();
  seq->window = config_.window;
  if (!s.has_cache && (!on_disk_ready || !RestoreFromDisk(&s))) return OkStatus();

  HistoryReuse match;
  const int reuse = PlanReuse(s, *seq, &match);
  if (reuse <= 0) {
    ReleaseCache(&s, false);
    return OkStatus();
  }
  if (s.swapped) {
    std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapIn(s.cache_seq);
    if (!plan || !mover_.swap(*plan, /*to_host=*/false).ok()) {
      ReleaseCache(&s, false);
      return OkStatus();
    }
    s.swapped = false;
  }
  const int num_evicted = reuse >= SinkSpan() + s.num_evicted ? s.num_evicted : 0;
  if (!TruncateCache(s.cache_seq, reuse - num_evicted)) {
    ReleaseCache(&s, false);
    return OkStatus();
  }
  // The history as generated up to the match, then what the prompt adds.
  std::vector<int32_t> tokens(s.tokens.begin(), s.tokens.begin() + match.keep);
  tokens.insert(tokens.end(), seq->tokens.begin() + match.resume, seq->tokens.end());
  seq->tokens = std::move(tokens);
  seq->prompt_len = static_cast<int>(seq->tokens.size());
  std::erase_if(s.generated, [&](const TokenRange& r) { return r.begin >= match.keep; });
  if (!s.generated.empty()) s.generated.back().end = std::min(s.generated.back().end, match.keep);
  s.tokens.clear();
  cache_->Rename(s.cache_seq, seq->id);
  s.has_cache = false;
  seq->holds_cache = true;
  seq->num_computed = reuse;
  seq->num_evicted = num_evicted;
  return OkStatus();
}

int ChatSessionStore::PlanReuse(const ChatSession& s, const Sequence& seq, HistoryReuse* match) const {
  const std::span<const int32_t> prompt(seq.tokens);
  *match = MatchHistory(s.tokens, s.generated, prompt, *tokenizer_);
  auto new_len = [&] { return match->keep + static_cast<int>(prompt.size()) - match->resume; };
  if (!config_.window.sliding() && config_.max_model_len > 0 && new_len() > static_cast<int>(prompt.size()) &&
      new_len() >= config_.max_model_len) {
    // The history's own tokens would leave no room to generate: reuse the exact prefix only.
    int common = 0;
    while (common < match->keep && s.tokens[static_cast<size_t>(common)] == prompt[static_cast<size_t>(common)]) {
      ++common;
    }
    *match = {common, common};
  }
  // One token at least is computed, so the step has logits to sample from.
  int reuse = std::min(match->keep, new_len() - 1);
  // The window evicted the history's tokens [sink, sink + num_evicted): a match that ends
  // past them reuses the cache as it is, one that ends inside them only the sink blocks.
  if (s.num_evicted > 0 && reuse < SinkSpan() + s.num_evicted) reuse = std::min(reuse, SinkSpan());
  return reuse;
}

int ChatSessionStore::SinkSpan() const {
  const int bs = cache_->block_size();
  return (config_.window.sink_tokens + bs - 1) / bs * bs;
}

void ChatSessionStore::Detach(const std::string& tenant, const std::string& id, Sequence* seq) {
  auto it = sessions_.find(Key(tenant, id));
  if (it == sessions_.end()) {
    if (seq->holds_cache) cache_->Free(seq->id);
    seq->holds_cache = false;
    return;
  }
  ChatSession& s = it->second;
  std::vector<TokenRange> generated = std::move(s.generated);  // of the history seq continued
  ReleaseCache(&s, false);
  s.in_use = false;
  s.last_used = Clock::now();
  if (!seq->holds_cache || seq->num_computed == 0) {
    if (seq->holds_cache) cache_->Free(seq->id);
    seq->holds_cache = false;
    return;
  }
  s.cache_seq = next_seq_id_();
  cache_->Rename(seq->id, s.cache_seq);
  seq->holds_cache = false;
  s.has_cache = true;
  s.tokens.assign(seq->tokens.begin(), seq->tokens.begin() + seq->num_computed);
  s.num_evicted = seq->num_evicted;
  if (seq->num_computed > seq->prompt_len) generated.push_back({seq->prompt_len, seq->num_computed});
  s.generated = std::move(generated);
  if (cache_->IsSwapped(s.cache_seq)) {
    // Preempted to the host tier: it stays there; the next turn swaps it in and trims it.
    s.swapped = true;
    return;
  }
  // Slots reserved by a step that failed were never computed: give them back.
  if (!TruncateCache(s.cache_seq, seq->cache_position())) ReleaseCache(&s, false);
}

bool ChatSessionStore::Drop(const std::string& tenant, const std::string& id) {
  auto it = sessions_.find(Key(tenant, id));
  if (it != sessions_.end() && it->second.in_use) return false;
  // A session that left memory may be on disk only (after a restart).
  const bool on_disk = RemoveFromDisk(tenant, id);
  if (it == sessions_.end()) return on_disk;
  ReleaseCache(&it->second, true);
  sessions_.erase(it);
  return true;
}

bool ChatSessionStore::ReclaimOne() {
  ChatSession* lru = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.in_use || !s.has_cache || s.swapped) continue;
    if (lru == nullptr || s.last_used < lru->last_used) lru = &s;
  }
  if (lru == nullptr) return false;
  if (std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapOut(lru->cache_seq)) {
    if (mover_.swap(*plan, /*to_host=*/true).ok()) {
      lru->swapped = true;
      return true;
    }
  }
  Evict(lru);
  return true;
}

void ChatSessionStore::Expire(Clock::time_point now) {
  const auto ttl = std::chrono::duration<double>(config_.ttl_seconds);
  std::vector<std::string> expired;  // keys
  for (auto& [key, s] : sessions_) {
    if (s.in_use || now - s.last_used < ttl) continue;
    // First expiry: offload to the host tier when there is room; a second TTL drops it.
    if (s.has_cache && !s.swapped && now - s.last_used < 2 * ttl) {
      if (std::optional<KvCacheManager::SwapPlan> plan = cache_->SwapOut(s.cache_seq)) {
        if (mover_.swap(*plan, /*to_host=*/true).ok()) {
          s.swapped = true;
          continue;
        }
      }
    }
    if (!s.swapped || now - s.last_used >= 2 * ttl) expired.push_back(key);
  }
  for (const std::string& key : expired) {
    LOG_DEBUG("a chat session of tenant '{}' expired", sessions_[key].tenant);
    Evict(&sessions_[key]);
    sessions_.erase(key);
  }
}

}  // namespace kvserve
