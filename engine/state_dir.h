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
// the caller recomputes: never a wrong answer. Files are written to a temporary name and
// renamed, so a crash leaves the old record or the new one.
//
// Disk use is bounded: after each write the least recently used records (file mtime; a read
// touches its file) go until the records fit in `max_bytes`.
//
// Thread-safe (one lock; disk I/O under it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvserve {

class Model;
class KvSpec;

class StateDir {
 public:
  // Creates `dir` if needed. max_bytes <= 0: unbounded.
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
  void EnforceBoundLocked(const std::string& keep);

  const std::string dir_;
  const int64_t max_bytes_;
  std::mutex mu_;
};

// SHA-256 of `data`, raw (32 bytes).
std::string Sha256(std::string_view data);

// What a session's KV bytes are valid for: the format version, the model (its GGUF header,
// size and samples of its tensor data, the matrix type it was converted to) and the KV
// layout (dtype, shape, block size). 32 bytes.
std::string StateIdentity(const Model& model, const KvSpec& spec);

}  // namespace kvserve
