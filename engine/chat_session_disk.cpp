// ChatSessionStore: chat sessions' caches on disk (--state-dir). A record holds what the
// session knows of its history and its cache's bytes, block by block:
//
//   u32 n, i32 tokens[n] | u32 m, (i32 begin, i32 end)[m] generated ranges |
//   i32 num_evicted | i32 cache positions | u32 blocks | u64 block bytes | bytes
//
// under the key of (tenant, id) and the identity of the model and KV layout (StateDir checks
// both and the checksum). A record is read back once: the session in memory is the truth
// from then on, and the file goes.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "engine/chat_session_store.h"

namespace kvserve {
namespace {

constexpr std::string_view kKind = "sessions";

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads values off a payload; every read is bounds-checked (ok() turns false for good).
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  T Get() {
    T v{};
    if (!Has(sizeof(T))) return v;
    std::memcpy(&v, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  bool Has(size_t n) {
    ok_ = ok_ && n <= data_.size() - at_;
    return ok_;
  }
  std::string_view Take(size_t n) {
    if (!Has(n)) return {};
    at_ += n;
    return data_.substr(at_ - n, n);
  }
  bool ok() const { return ok_; }
  bool at_end() const { return at_ == data_.size(); }

 private:
  std::string_view data_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

bool ChatSessionStore::SaveToDisk(const ChatSession& s) {
  if (config_.state == nullptr || !s.has_cache || s.in_use || !mover_.read) return false;
  if (cache_->holds_compact_blocks(s.cache_seq)) return false;
  const size_t block_bytes = cache_->spec().block_bytes();
  const int positions = cache_->num_cached_tokens(s.cache_seq);
  std::string payload;
  Put(&payload, static_cast<uint32_t>(s.tokens.size()));
  payload.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
  Put(&payload, static_cast<uint32_t>(s.generated.size()));
  for (const TokenRange& r : s.generated) {
    Put(&payload, static_cast<int32_t>(r.begin));
    Put(&payload, static_cast<int32_t>(r.end));
  }
  Put(&payload, static_cast<int32_t>(s.num_evicted));
  Put(&payload, static_cast<int32_t>(positions));
  std::vector<int32_t> blocks;
  if (s.swapped) {
    const std::span<const int32_t> slots = cache_->host_slots(s.cache_seq);
    blocks.assign(slots.begin(), slots.end());
  } else {
    const std::span<const BlockId> table = cache_->table(s.cache_seq).blocks();
    blocks.assign(table.begin(), table.end());
  }
  Put(&payload, static_cast<uint32_t>(blocks.size()));
  Put(&payload, static_cast<uint64_t>(block_bytes));
  const size_t start = payload.size();
  payload.resize(start + blocks.size() * block_bytes);
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint8_t* dst = reinterpret_cast<uint8_t*>(payload.data() + start + i * block_bytes);
    if (s.swapped) {
      std::memcpy(dst, cache_->host_block_data(blocks[i]), block_bytes);
    } else if (!mover_.read(blocks[i], {dst, block_bytes}).ok()) {
      return false;
    }
  }
  const Status st = config_.state->Write(kKind, Key(s.tenant, s.id), config_.state_identity, std::move(payload));
  if (!st.ok()) LOG_WARN("a chat session's cache was not saved: {}", st.message());
  return st.ok();
}

bool ChatSessionStore::DiskReadPending(const ChatSession& s) {
  if (config_.state == nullptr || !mover_.write) return false;
  return !config_.state->Prefetch(kKind, Key(s.tenant, s.id), config_.state_identity);
}

bool ChatSessionStore::RestoreFromDisk(ChatSession* s) {
  if (config_.state == nullptr || s->has_cache || !mover_.write) return false;
  const auto start = std::chrono::steady_clock::now();
  const std::string key = Key(s->tenant, s->id);
  std::optional<std::string> payload = config_.state->Read(kKind, key, config_.state_identity);
  if (!payload) return false;
  config_.state->Remove(kKind, key);  // the session in memory holds it from now on

  Reader in(*payload);
  const uint32_t num_tokens = in.Get<uint32_t>();
  if (num_tokens == 0 || !in.Has(size_t{num_tokens} * sizeof(int32_t))) return false;
  std::vector<int32_t> tokens(num_tokens);
  std::memcpy(tokens.data(), in.Take(tokens.size() * sizeof(int32_t)).data(), tokens.size() * sizeof(int32_t));
  // A record that passes its checksum may still have been written by hand or by another build:
  // the ids are decoded and matched against prompts, so each must be in the vocabulary.
  const int32_t vocab = tokenizer_->vocab_size();
  if (std::any_of(tokens.begin(), tokens.end(), [vocab](int32_t t) { return t < 0 || t >= vocab; })) {
    LOG_WARN("a chat session's state record has token ids outside the vocabulary; its next turn recomputes");
    return false;
  }
  const uint32_t num_ranges = in.Get<uint32_t>();
  std::vector<TokenRange> generated;
  for (uint32_t i = 0; in.ok() && i < num_ranges; ++i) {
    const int32_t begin = in.Get<int32_t>(), end = in.Get<int32_t>();
    if (begin < 0 || begin > end || end > static_cast<int32_t>(num_tokens)) return false;
    generated.push_back({begin, end});
  }
  const int32_t num_evicted = in.Get<int32_t>();
  const int32_t positions = in.Get<int32_t>();
  const uint32_t num_blocks = in.Get<uint32_t>();
  const uint64_t block_bytes = in.Get<uint64_t>();
  const int bs = cache_->block_size();
  // StateDir checked the identity (model, KV layout); these hold for any record it wrote.
  if (!in.ok() || num_evicted < 0 || positions <= 0 || num_evicted + positions != static_cast<int64_t>(num_tokens) ||
      block_bytes != cache_->spec().block_bytes() || num_blocks != static_cast<uint32_t>((positions + bs - 1) / bs) ||
      !in.Has(size_t{num_blocks} * block_bytes)) {
    LOG_WARN("a chat session's state record is inconsistent; its next turn recomputes");
    return false;
  }
  const std::string_view bytes = in.Take(size_t{num_blocks} * block_bytes);
  if (!in.at_end()) return false;

  const SeqId seq = next_seq_id_();
  std::optional<std::vector<BlockId>> blocks = cache_->AllocateSlots(seq, positions);
  if (!blocks) {
    cache_->Free(seq);
    return false;  // no room now: the turn recomputes
  }
  for (size_t i = 0; i < blocks->size(); ++i) {
    const auto* src = reinterpret_cast<const uint8_t*>(bytes.data() + i * block_bytes);
    if (!mover_.write((*blocks)[i], {src, block_bytes}).ok()) {
      cache_->Free(seq);
      return false;
    }
  }
  s->cache_seq = seq;
  s->has_cache = true;
  s->swapped = false;
  s->tokens = std::move(tokens);
  s->generated = std::move(generated);
  s->num_evicted = num_evicted;
  LOG_INFO("a chat session's cache came back from disk: {} positions, {:.1f} MiB in {:.0f} ms", positions,
           static_cast<double>(bytes.size()) / (1 << 20),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return true;
}

bool ChatSessionStore::RemoveFromDisk(const std::string& tenant, const std::string& id) {
  return config_.state != nullptr && config_.state->Remove(kKind, Key(tenant, id));
}

void ChatSessionStore::Evict(ChatSession* s) {
  SaveToDisk(*s);
  ReleaseCache(s, true);
}

int ChatSessionStore::SaveAll() {
  int saved = 0;
  if (config_.state == nullptr) return 0;
  for (auto& [key, s] : sessions_) {
    config_.state->Flush();  // at shutdown: each waits for room, none is dropped
    saved += SaveToDisk(s);
  }
  config_.state->Flush();  // stopped means saved
  if (saved > 0) LOG_INFO("saved {} chat sessions to {}", saved, config_.state->dir());
  return saved;
}

}  // namespace kvserve
