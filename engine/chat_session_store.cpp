#include "engine/chat_session_store.h"

#include <algorithm>

#include "common/log.h"

namespace kvserve {

ChatSessionStore::ChatSessionStore(const ChatSessionConfig& config, KvCacheManager* cache,
                                   std::function<SeqId()> next_seq_id, ByteMover mover)
    : config_(config), cache_(cache), next_seq_id_(std::move(next_seq_id)), mover_(std::move(mover)) {}

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
    ReleaseCache(lru, true);
    sessions_.erase(Key(lru->tenant, lru->id));
  }
}

Status ChatSessionStore::Attach(const std::string& tenant, const std::string& id, Sequence* seq) {
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
  s.in_use = true;
  s.last_used = Clock::now();
  seq->window = config_.window;
  if (!s.has_cache) return OkStatus();

  // Longest reusable prefix: the stored tokens that the new prompt repeats, minus one token
  // so the step has logits to sample from.
  const std::vector<int32_t>& prompt = seq->tokens;
  size_t common = 0;
  while (common < s.tokens.size() && common < prompt.size() && s.tokens[common] == prompt[common]) ++common;
  int reuse = static_cast<int>(std::min(common, prompt.size() - 1));
  // Under a window the cache no longer holds the evicted tokens: only an exact continuation of
  // the whole history can reuse it.
  if (s.num_evicted > 0 && common < s.tokens.size()) reuse = 0;
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
  if (!TruncateCache(s.cache_seq, reuse - s.num_evicted)) {
    ReleaseCache(&s, false);
    return OkStatus();
  }
  cache_->Rename(s.cache_seq, seq->id);
  s.has_cache = false;
  seq->holds_cache = true;
  seq->num_computed = reuse;
  seq->num_evicted = s.num_evicted;
  seq->request->usage.cached_prompt_tokens = reuse;
  return OkStatus();
}

void ChatSessionStore::Detach(const std::string& tenant, const std::string& id, Sequence* seq) {
  auto it = sessions_.find(Key(tenant, id));
  if (it == sessions_.end()) {
    if (seq->holds_cache) cache_->Free(seq->id);
    seq->holds_cache = false;
    return;
  }
  ChatSession& s = it->second;
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
  // Slots reserved by a step that failed were never computed: give them back.
  if (!TruncateCache(s.cache_seq, seq->cache_position())) ReleaseCache(&s, false);
}

void ChatSessionStore::Drop(const std::string& tenant, const std::string& id) {
  auto it = sessions_.find(Key(tenant, id));
  if (it == sessions_.end() || it->second.in_use) return;
  ReleaseCache(&it->second, true);
  sessions_.erase(it);
}

bool ChatSessionStore::ReclaimOne() {
  ChatSession* lru = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.in_use || !s.has_cache || s.swapped) continue;
    if (lru == nullptr || s.last_used < lru->last_used) lru = &s;
  }
  if (lru == nullptr) return false;
  ReleaseCache(lru, true);
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
    ReleaseCache(&sessions_[key], true);
    sessions_.erase(key);
  }
}

}  // namespace kvserve
