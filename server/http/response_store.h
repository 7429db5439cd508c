// ResponseStore: the Responses API's stored responses (responses_api.h), as deltas.
//
// A stored response keeps what its own request added (its input items and its output) and the
// id of the response it continued; a conversation is the chain walked back to its first
// response. So a chain of N turns costs O(N) bytes, where copying the whole conversation into
// every response cost O(N^2).
//
// Bounded in bytes, per API key first: a key past `max_bytes_per_key` loses its own oldest
// responses, never another key's; past `max_bytes` in all, the oldest of any key go. With a
// state directory (--state-dir) every stored response is also a record there (written by its
// writer thread), read back when it is no longer in memory (after a restart); a response that
// leaves the store leaves the disk too.
//
// Deleting a response removes its turn from every conversation that continues it: a later
// response of the chain can still be read, but continuing it is a 404 (its conversation would
// hold the deleted text). A response being generated is known to the store (Begin): deleting
// it then keeps it from being stored when it completes. Thread-safe (one lock; disk reads
// outside it).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/state_dir.h"
#include "engine/tokenizer/chat_template.h"

namespace kvserve {

struct StoredResponse {
  std::string id;
  std::string tenant;
  std::string session_id;         // the chain's chat session
  std::string previous_id;        // the response this one continued ("" for a chain's first)
  std::vector<ChatMessage> input;  // this request's input items
  std::string output;              // this response's text
  std::string object;              // the response object (JSON)

  int64_t Bytes() const;
};

struct ResponseStoreLimits {
  int64_t max_bytes = int64_t{256} << 20;
  int64_t max_bytes_per_key = int64_t{64} << 20;
  // Also counts the responses not stored here (for /metrics; null: only not_stored()).
  std::atomic<int64_t>* not_stored_total = nullptr;
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits = {}, StateDir* disk = nullptr) : limits_(limits), disk_(disk) {}

  // `id` of `tenant` is being generated, in chat session `session_id`.
  void Begin(const std::string& tenant, const std::string& id, const std::string& session_id);
  // Whether a response that completes now would be stored and survive a restart: not deleted
  // while it ran, and the state directory (if any) writing. A response that would not is
  // answered with "store": false and counted (not_stored()).
  bool WillStore(const std::string& tenant, const std::string& id);
  // Stores a completed response (ends what Begin started).
  void Put(StoredResponse response);
  // Ends what Begin started without storing (an error, store: false).
  void End(const std::string& tenant, const std::string& id);

  // nullopt when `tenant` has no response `id`.
  std::optional<StoredResponse> Get(const std::string& tenant, const std::string& id);
  // The conversation that `id` ends: every input and output of its chain, oldest first;
  // nullopt when `id` or a response before it is gone.
  std::optional<std::vector<ChatMessage>> Conversation(const std::string& tenant, const std::string& id);
  // Deletes `id` (stored, or being generated); the chain's chat session id when there was
  // such a response ("" when it had none), nullopt when there was none.
  std::optional<std::string> Delete(const std::string& tenant, const std::string& id);

  int64_t bytes() const;
  int64_t bytes_of(const std::string& tenant) const;
  int64_t not_stored() const;

 private:
  struct Entry {
    StoredResponse response;
    int64_t bytes;
    std::list<std::string>::iterator order;  // in order_
  };
  static std::string Key(const std::string& tenant, const std::string& id);
  void InsertLocked(const std::string& key, StoredResponse response);
  void EraseLocked(const std::string& key, bool from_disk);
  std::optional<StoredResponse> ReadDisk(const std::string& tenant, const std::string& id);

  const ResponseStoreLimits limits_;
  StateDir* const disk_;  // nullable, not owned
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;           // by Key
  std::list<std::string> order_;                             // keys, oldest first
  std::unordered_map<std::string, int64_t> tenant_bytes_;
  std::unordered_map<std::string, std::deque<std::string>> tenant_order_;  // keys, oldest first (lazily pruned)
  std::unordered_map<std::string, std::string> running_;  // keys being generated -> their sessions
  std::set<std::string> deleted_;   // keys deleted while they ran
  int64_t bytes_ = 0;
  int64_t not_stored_ = 0;
  void CountNotStoredLocked();
};

}  // namespace kvserve
