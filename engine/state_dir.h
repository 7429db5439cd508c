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
// Writes happen on the directory's own writer thread (Write queues; Read sees what is queued),
// and so do reads ahead (Prefetch: a caller that must not wait for the disk, the engine thread,
// asks first and reads once the record is in memory); other reads on the caller's. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

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

  // Waits for the records queued so far to land, then stops the writer.
  ~StateDir();

  // Writes (replaces) the record `key` of `kind` ("sessions", "responses") on the writer
  // thread: the caller pays no disk I/O and no hashing, only the move of `payload`. Until it
  // lands, Read answers from the queued payload, and a newer Write of the same key replaces
  // it where it waits. RESOURCE_EXHAUSTED for a record over the bound (the old one goes) or
  // when 512 MiB already wait (nothing changes: the caller keeps or recomputes its state; a
  // record larger than that is taken when nothing else waits).
  // A write that then fails on disk is logged and counted (write_failures).
  [[nodiscard]] Status Write(std::string_view kind, std::string_view key, std::string_view identity,
                             std::string payload);
  // The payload of `key`, or nullopt when there is none or it is not valid (warned, removed).
  // Reads the disk on the caller's thread unless Prefetch said it need not.
  std::optional<std::string> Read(std::string_view kind, std::string_view key, std::string_view identity);
  // True when Read of `key` would answer now without the disk (a queued write of it, a record
  // read ahead, or no record at all). Otherwise the writer thread reads it ahead (once; before
  // the writes waiting), and it is false until then. Records read ahead and not yet Read wait
  // in memory, at most kMaxPendingBytes in all (the oldest go).
  bool Prefetch(std::string_view kind, std::string_view key, std::string_view identity);
  // Whether there was a record (queued or on disk). Read finds none from now on; the file goes
  // on the writer thread (after a write of it in flight), the directory fsynced.
  bool Remove(std::string_view kind, std::string_view key);
  // Returns once every record queued before the call has landed (or failed).
  void Flush();
  int64_t write_failures() const { return write_failures_.load(); }
  // False after a write failed (a full or read-only disk), until one succeeds again: what is
  // written now may not survive a restart.
  bool writing() const { return writing_.load(); }
  static constexpr int64_t kMaxPendingBytes = int64_t{512} << 20;

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

  // The writer thread.
  struct Job {
    std::string kind, key, identity, payload;
  };
  void Run();
  // Writes the record file (checksum, temporary name, fsync, rename, directory fsync); its
  // size. REQUIRES: io_mu_ held.
  StatusOr<int64_t> WriteFile(const Job& job, const std::string& path);
  void DropPendingLocked(const std::string& path);
  // Reads and checks the record file (an invalid one warned and removed): its payload.
  // REQUIRES: io_mu_ held, mu_ not.
  std::optional<std::string> ReadFile(const std::string& path, std::string_view key, std::string_view identity);
  // What Read answers from memory: a queued write, a record read ahead (taken), or none (no
  // record); nullopt when the file must be read.
  std::optional<std::optional<std::string>> AnswerLocked(const std::string& path, std::string_view key,
                                                         std::string_view identity);
  struct Fetch {
    std::string path, key, identity;
    std::optional<std::string> payload;  // read ahead: the record, or none (absent, invalid)
  };
  void KeepFetchedLocked(Fetch fetch);
  void ForgetFetchedLocked(const std::string& path);
  // Drops a queued write of `path` and queues the removal of its file.
  void RemoveLaterLocked(const std::string& path);

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
  // Lock order: io_mu_ (the files: one writer, reads, removals), then mu_ (everything else).
  std::mutex io_mu_;
  std::condition_variable cv_;       // work for the writer
  std::condition_variable idle_cv_;  // the writer finished a record
  std::unordered_map<std::string, std::shared_ptr<const Job>> pending_;  // by path: queued, not yet landed
  std::deque<std::string> queue_;                                        // paths, in order
  std::vector<std::string> stale_;   // records to remove (Remove, or replaced by a write over the bound)
  std::set<std::string> removing_;   // in stale_, not yet removed: Read treats them as gone
  std::string in_flight_;            // the path being written, "" when none
  std::deque<Fetch> reads_;                        // Prefetch: to read ahead, before the writes
  std::set<std::string> fetching_;                 // their paths, until they are kept
  std::unordered_map<std::string, Fetch> fetched_;  // read ahead, by path, until Read takes them
  std::deque<std::string> fetched_order_;          // oldest first (paths taken since are skipped)
  int64_t fetched_bytes_ = 0;
  int64_t pending_bytes_ = 0;
  bool stop_ = false;
  bool writer_stopped_ = false;
  std::atomic<int64_t> write_failures_{0};
  std::atomic<bool> writing_{true};
  std::thread writer_;
};


// What a session's KV bytes are valid for: the format version, the model (its GGUF header,
// size and samples of its tensor data, the matrix type it was converted to) and the KV
// layout (dtype, shape, block size). 32 bytes.
std::string StateIdentity(const Model& model, const KvSpec& spec);

}  // namespace kvserve
