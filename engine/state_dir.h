// StateDir: what kvserve keeps on disk across restarts (`--state-dir`): chat sessions' KV
// caches and stored Responses API responses, one file per record:
//
//   DIR/<kind>/<hex SHA-256 of the record key>.rec
//   magic "KVSREC01" | identity (32 bytes) | u32 key length | key | u64 payload length |
//   payload | SHA-256 of everything before (32 bytes)
//
// The key names its owner ("<tenant>\n<id>" style, the caller's choice) and is compared on
// read, so a file never answers for another key (another tenant). `identity` says what the
// payload is only valid for (the model, the KV layout, the format version: StateIdentity); a
// file whose checksum, identity or length is wrong is ignored with a warning and removed, so
// the caller recomputes: never a wrong answer. Files are written to a temporary name,
// fsynced, renamed, and the rename fsynced, so a crash or power loss leaves the old record or
// the new one. Files are 0600 and directories 0700 (records hold conversations).
//
// kvserve touches only what it wrote: the directory must be new, empty, or one it made (a
// KVSERVE-STATE marker file), and only DIR/<kind>/<64 hex>.rec records are ever read or
// removed. A record is read only if it is a regular file (no FIFO, device or link) no larger
// than the bound.
//
// Disk use is bounded: the records are indexed in memory at Open (their sizes; their use
// order from the mtime, which a read touches), and after each write the least recently used
// go until the records fit in `max_bytes`, without rescanning the directory.
//
// Thread-safe (one lock; disk I/O under it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/sha256.h"
#include "common/status.h"

namespace kvserve {

class Model;
class KvSpec;

class StateDir {
 public:
  // Creates `dir` if needed (0700). INVALID_ARGUMENT for a directory that holds files kvserve
  // did not write. max_bytes <= 0: unbounded.
  [[nodiscard]] static StatusOr<std::unique_ptr<StateDir>> Open(const std::string& dir, int64_t max_bytes);

  // Writes (replaces) the record `key` of `kind` ("sessions", "responses").
  [[nodiscard]] Status Write(std::string_view kind, std::string_view key, std::string_view identity,
                             std::string_view payload);
  // The payload of `key`, or nullopt when there is none or it is not valid (warned, removed).
  std::optional<std::string> Read(std::string_view kind, std::string_view key, std::string_view identity);
  // Whether there was a record.
  bool Remove(std::string_view kind, std::string_view key);

  const std::string& dir() const { return dir_; }
  int64_t max_bytes() const { return max_bytes_; }
  int64_t used_bytes();  // all records' files

 private:
  StateDir(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(std::string_view kind, std::string_view key) const;
  // The index: `path` (re)entered as the most recently used.
  void IndexLocked(const std::string& path, int64_t size);
  void UnindexLocked(const std::string& path);
  void RemoveLocked(const std::string& path);  // the file and its entry
  void EnforceBoundLocked(const std::string& keep);

  struct Record {
    int64_t size;
    uint64_t tick;  // its last use
  };
  const std::string dir_;
  const int64_t max_bytes_;
  std::mutex mu_;
  std::unordered_map<std::string, Record> records_;  // by path
  std::map<uint64_t, std::string> by_use_;           // tick -> path, oldest first
  uint64_t tick_ = 0;
  int64_t total_bytes_ = 0;
};


// What a session's KV bytes are valid for: the format version, the model (its GGUF header,
// size and samples of its tensor data, the matrix type it was converted to) and the KV
// layout (dtype, shape, block size). 32 bytes.
std::string StateIdentity(const Model& model, const KvSpec& spec);

}  // namespace kvserve
