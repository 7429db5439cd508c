// ChatSessionStore: server-side chat sessions that keep their KV cache between turns, so a
// new turn prefills only its new tokens.
//
// A session owns a KV cache sequence (its own SeqId) while idle; a request that continues the
// session takes that cache over (KvCacheManager::Rename) and hands it back when it finishes.
// Sessions are bounded: at most `max_sessions` in all and `max_per_tenant` per tenant (least
// recently used dropped first), idle ones expire after `ttl_seconds` (moved to the host tier
// first when there is one), and under memory pressure the least recently used idle session
// gives up its cache (it keeps its tokens; the next turn recomputes).
//
// With a state directory (`--state-dir`, engine/state_dir.h) a session's cache that leaves
// memory (limits, TTL, pressure without host room) and every idle one at shutdown is written
// to disk, and the session's next turn reads it back (chat_session_disk.cpp): a conversation
// survives a restart. A session holding compaction-region blocks is not written.
//
// Sessions are named by (tenant, id): each tenant (API key) has its own namespace, so one
// tenant can neither see, use, block nor drop another's session, and errors never echo ids.
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/history_match.h"
#include "engine/sequence.h"
#include "engine/state_dir.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

struct ChatSessionConfig {
  int max_sessions = 256;
  int max_per_tenant = 64;
  double ttl_seconds = 600;
  WindowPolicy window;  // applied to every session's sequence
  int max_model_len = 0;  // without a window, a continued prompt stays shorter than this
  StateDir* state = nullptr;   // nullable, not owned: where caches go when they leave memory
  std::string state_identity;  // StateIdentity() of the model and the KV layout
};

struct ChatSession {
  std::string id;
  std::string tenant;
  std::vector<int32_t> tokens;  // tokens whose KV the cache holds (with any evicted ones)
  // The ranges of `tokens` that the model generated (its replies, as generated). While a
  // request uses the session: those of the history it continues.
  std::vector<TokenRange> generated;
  int num_evicted = 0;
  SeqId cache_seq = 0;          // valid when has_cache
  bool has_cache = false;
  bool swapped = false;         // its cache is in the host tier
  bool in_use = false;          // a request is running on it
  Clock::time_point last_used{};
};

class ChatSessionStore {
 public:
  // How the store moves bytes it does not own: a swap plan's copies (device -> host when
  // `to_host`) and copy-on-write block copies.
  struct ByteMover {
    std::function<Status(const KvCacheManager::SwapPlan&, bool to_host)> swap;
    std::function<Status(std::span<const std::pair<BlockId, BlockId>>)> copy;
    // One device block's bytes (spec().block_bytes()), out and in (with a state directory).
    std::function<Status(BlockId, std::span<uint8_t>)> read;
    std::function<Status(BlockId, std::span<const uint8_t>)> write;
  };
  // `next_seq_id` hands out fresh cache sequence ids; `tokenizer` reads the texts that
  // MatchHistory compares.
  ChatSessionStore(const ChatSessionConfig& config, KvCacheManager* cache, const Tokenizer* tokenizer,
                   std::function<SeqId()> next_seq_id, ByteMover mover);

  // Prepares `seq` (a new request's first choice) to continue tenant's session `id`: creates
  // the session if needed (dropping least recently used ones beyond the limits), and gives
  // the sequence the session's cache for what its prompt repeats of the history
  // (MatchHistory): the sequence's tokens become the history's, as generated, up to there, then
  // the rest of the prompt; `prompt_len` and `num_computed` follow. Fails
  // with FAILED_PRECONDITION if another request is using the session, RESOURCE_EXHAUSTED when
  // every session slot is busy, and UNAVAILABLE while the session's cache is being read from
  // the state directory (on its writer thread: the caller never waits for the disk; try again
  // later) unless !wait_for_disk, which attaches at once without it (the turn recomputes).
  [[nodiscard]] Status Attach(const std::string& tenant, const std::string& id, Sequence* seq,
                              bool wait_for_disk = true);
  // Takes back the cache of `seq` (the session's request finished, failed or was aborted).
  void Detach(const std::string& tenant, const std::string& id, Sequence* seq);
  // Drops a session, frees its cache and removes its record on disk; false when unknown or in
  // use.
  bool Drop(const std::string& tenant, const std::string& id);
  // Moves the least recently used idle session's cache to the host tier, or frees it when
  // there is no room there; false when no idle session holds device blocks.
  bool ReclaimOne();
  // Applies the TTL: offloads or drops idle sessions.
  void Expire(Clock::time_point now);
  // Writes every idle session's cache to the state directory and waits until they landed
  // (at shutdown); how many.
  int SaveAll();

  int size() const { return static_cast<int>(sessions_.size()); }
  // Visits every session that holds a cache no request is using (on the device or the host).
  void ForEachIdleCache(const std::function<void(const ChatSession&)>& visit) const {
    for (const auto& [key, s] : sessions_) {
      if (s.has_cache && !s.in_use) visit(s);
    }
  }

 private:
  // The map key of (tenant, id): unambiguous for any bytes in either.
  static std::string Key(const std::string& tenant, const std::string& id);
  void ReleaseCache(ChatSession* s, bool count_eviction);
  // How many of the history's tokens `seq` reuses (0: none), with the match it follows.
  int PlanReuse(const ChatSession& s, const Sequence& seq, HistoryReuse* match) const;
  int SinkSpan() const;  // the window's sink tokens, in whole blocks
  // Cuts the cache of `seq` to `num_tokens` positions; false if that needed a block copy for
  // which there was no room (the cache is then unchanged).
  bool TruncateCache(SeqId seq, int num_tokens);
  // chat_session_disk.cpp: writes an idle session's cache to the state directory (false
  // without one, or when it could not); reads it back into a session without a cache (false
  // when there is no valid record or no room: the turn recomputes).
  bool SaveToDisk(const ChatSession& s);
  // Whether RestoreFromDisk would read the disk (a record not yet in memory): the read is then
  // asked of the state directory's thread.
  bool DiskReadPending(const ChatSession& s);
  bool RestoreFromDisk(ChatSession* s);
  // Removes tenant's record of session `id`; whether there was one.
  bool RemoveFromDisk(const std::string& tenant, const std::string& id);
  // ReleaseCache for a session that leaves memory: to disk first when there is a state dir.
  void Evict(ChatSession* s);
  // Drops least recently used idle sessions while `over_limit()`.
  void DropLruWhile(const std::function<bool()>& over_limit, const std::string& tenant);

  ChatSessionConfig config_;
  KvCacheManager* cache_;
  const Tokenizer* tokenizer_;
  std::function<SeqId()> next_seq_id_;
  ByteMover mover_;
  std::unordered_map<std::string, ChatSession> sessions_;  // by Key(tenant, id)
};

}  // namespace kvserve
