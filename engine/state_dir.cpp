// StateDir (see state_dir.h).
#include "engine/state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "cache/kv_spec.h"
#include "common/log.h"
#include "engine/model/gguf.h"
#include "engine/model/weights.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'V', 'S', 'R', 'E', 'C', '0', '1'};
constexpr size_t kHashBytes = 32;
// Bumped whenever what a payload means changes (its layout, or the KV bytes' meaning).
constexpr uint32_t kFormatVersion = 1;

// Sha256Hasher, its digest as the 32 raw bytes records hold.
class Sha256Stream : public Sha256Hasher {
 public:
  std::string Finish() {
    const Sha256Digest d = Sha256Hasher::Finish();
    return std::string(reinterpret_cast<const char*>(d.data()), d.size());
  }
};

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

std::string StateIdentity(const Model& model, const KvSpec& spec) {
  Sha256Stream h;
  h.AddValue(kFormatVersion);
  const GgufFile& file = model.file();
  h.AddValue(file.file_size());
  // The header (metadata and tensor infos), then up to 1 MiB at 16 places of the data: a
  // whole-file hash of a large model would cost seconds at every start.
  h.Add(file.file_data(), static_cast<size_t>(file.data_offset()));
  const uint64_t data_bytes = file.file_size() - file.data_offset();
  constexpr uint64_t kSample = uint64_t{1} << 16;
  for (int i = 0; i < 16; ++i) {
    const uint64_t at = data_bytes <= kSample ? 0 : (data_bytes - kSample) / 15 * static_cast<uint64_t>(i);
    h.Add(file.file_data() + file.data_offset() + at, static_cast<size_t>(std::min(kSample, data_bytes)));
  }
  // The types the weights were converted to at load (--matrix-type).
  const ModelWeights& w = model.weights();
  h.AddValue(w.token_embd.type);
  h.AddValue(w.output.type);
  for (const LayerWeights& l : w.layers) {
    h.AddValue(l.wq.type);
    h.AddValue(l.w_down.type);
  }
  h.Add(spec.Describe());
  h.AddValue(spec.block_bytes());
  return h.Finish();
}

namespace {

constexpr char kMarker[] = "KVSERVE-STATE";  // in every directory kvserve made its own
constexpr const char* kKinds[] = {"sessions", "responses"};

bool IsRecordName(const std::string& name) {
  if (name.size() != 64 + 4 || !name.ends_with(".rec")) return false;
  return std::all_of(name.begin(), name.end() - 4, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// mkdir with 0700 (state is private to the server's user); an existing directory keeps its
// mode unless `tighten`.
bool MakePrivateDir(const std::string& path, bool tighten) {
  if (::mkdir(path.c_str(), 0700) == 0) return true;
  if (errno != EEXIST) return false;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return !tighten || ::chmod(path.c_str(), 0700) == 0;
}

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// fsync of a directory: a rename or unlink in it survives a power loss once this returns.
void SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

StatusOr<std::unique_ptr<StateDir>> StateDir::Open(const std::string& dir, int64_t max_bytes) {
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (!existed) fs::create_directories(fs::path(dir).parent_path().empty() ? fs::path(".") : fs::path(dir).parent_path(), ec);
  if (!MakePrivateDir(dir, /*tighten=*/false)) {
    return InvalidArgumentError("--state-dir: cannot create directory '" + dir + "': " + std::strerror(errno));
  }
  // kvserve deletes what it wrote there (records past the bound, invalid ones): a directory
  // that holds anything else is the operator's, not ours to clean.
  const bool marked = fs::exists(fs::path(dir) / kMarker, ec);
  if (!marked) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool ours = std::find(std::begin(kKinds), std::end(kKinds), name) != std::end(kKinds) && e.is_directory(ec);
      if (!ours) {
        return InvalidArgumentError("--state-dir: '" + dir + "' is not empty and is not a kvserve state directory (it has '" +
                                    name + "'); give an empty or new directory");
      }
    }
    const int fd = ::open((fs::path(dir) / kMarker).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || !WriteAll(fd, "kvserve state directory: records of chat sessions and responses\n")) {
      if (fd >= 0) ::close(fd);
      return InvalidArgumentError("--state-dir: cannot write in '" + dir + "': " + std::strerror(errno));
    }
    ::fsync(fd);
    ::close(fd);
  }
  ::chmod(dir.c_str(), 0700);
  std::unique_ptr<StateDir> state(new StateDir(dir, max_bytes));
  // The index: every record, oldest use first (by mtime, which Read touches); leftovers of a
  // write a crash interrupted go.
  struct Found {
    fs::file_time_type mtime;
    std::string path;
    int64_t size;
  };
  std::vector<Found> found;
  for (const char* kind : kKinds) {
    const fs::path sub = fs::path(dir) / kind;
    if (!fs::is_directory(fs::symlink_status(sub, ec))) continue;
    ::chmod(sub.c_str(), 0700);
    for (const auto& e : fs::directory_iterator(sub, ec)) {
      const std::string name = e.path().filename().string();
      if (name.ends_with(".rec.tmp") && IsRecordName(name.substr(0, name.size() - 4))) {
        fs::remove(e.path(), ec);
      } else if (IsRecordName(name) && e.is_regular_file(ec) && !e.is_symlink(ec)) {
        found.push_back({e.last_write_time(ec), e.path().string(), static_cast<int64_t>(e.file_size(ec))});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) state->IndexLocked(f.path, f.size);
  state->writer_ = std::thread([raw = state.get()] {
    raw->Run();
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->writer_stopped_ = true;
    raw->idle_cv_.notify_all();
  });
  return state;
}

std::string StateDir::PathOf(std::string_view kind, std::string_view key) const {
  return dir_ + "/" + std::string(kind) + "/" + ToHex(Sha256(key)) + ".rec";
}

void StateDir::IndexLocked(const std::string& path, int64_t size) {
  UnindexLocked(path);
  const uint64_t tick = ++tick_;
  records_[path] = {size, tick};
  by_use_[tick] = path;
  total_bytes_ += size;
}

void StateDir::UnindexLocked(const std::string& path) {
  const auto it = records_.find(path);
  if (it == records_.end()) return;
  total_bytes_ -= it->second.size;
  by_use_.erase(it->second.tick);
  records_.erase(it);
}

void StateDir::RemoveLocked(const std::string& path) {
  ::unlink(path.c_str());
  UnindexLocked(path);
}

Status StateDir::Write(std::string_view kind, std::string_view key, std::string_view identity, std::string payload) {
  if (identity.size() != kHashBytes) return InvalidArgumentError("state identity must be 32 bytes");
  if (std::find(std::begin(kKinds), std::end(kKinds), kind) == std::end(kKinds)) {
    return InvalidArgumentError("unknown state record kind");
  }
  auto job = std::make_shared<Job>();
  job->kind = std::string(kind);
  job->key = std::string(key);
  job->identity = std::string(identity);
  job->payload = std::move(payload);
  const auto size = static_cast<int64_t>(sizeof(kMagic) + kHashBytes + sizeof(uint32_t) + key.size() + sizeof(uint64_t) +
                                         job->payload.size() + kHashBytes);
  const std::string path = PathOf(kind, key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (max_bytes_ > 0 && size > max_bytes_) {
      RemoveLaterLocked(path);  // the old record would answer for a state that moved on
      cv_.notify_all();
      return ResourceExhaustedError("the record is larger than --state-max-bytes");
    }
    const auto it = pending_.find(path);
    const int64_t replaced = it == pending_.end() ? 0 : static_cast<int64_t>(it->second->payload.size());
    // Past the cap nothing more waits, but a record larger than the cap alone is taken when
    // nothing else waits.
    if (pending_bytes_ - replaced > 0 &&
        pending_bytes_ - replaced + static_cast<int64_t>(job->payload.size()) > kMaxPendingBytes) {
      ++write_failures_;
      return ResourceExhaustedError("the state writer is behind (over 512 MiB waiting); the record was not saved");
    }
    pending_bytes_ += static_cast<int64_t>(job->payload.size()) - replaced;
    ForgetFetchedLocked(path);  // the write is newer
    // A record already waiting is replaced where it waits (only the newest state is written);
    // one being written now is queued again.
    if (it == pending_.end() || path == in_flight_) queue_.push_back(path);
    pending_[path] = std::move(job);
  }
  cv_.notify_all();
  return OkStatus();
}

void StateDir::DropPendingLocked(const std::string& path) {
  const auto it = pending_.find(path);
  if (it == pending_.end()) return;
  pending_bytes_ -= static_cast<int64_t>(it->second->payload.size());
  pending_.erase(it);  // its place in queue_ is skipped
}

void StateDir::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !stale_.empty() || !reads_.empty(); });
    if (!reads_.empty() && !stop_) {  // a reader waits for these
      Fetch fetch = std::move(reads_.front());
      reads_.pop_front();
      lock.unlock();
      {
        std::lock_guard<std::mutex> io(io_mu_);
        fetch.payload = ReadFile(fetch.path, fetch.key, fetch.identity);
      }
      lock.lock();
      fetching_.erase(fetch.path);
      // A write or removal since is newer than what was read.
      if (!pending_.contains(fetch.path) && !removing_.contains(fetch.path)) KeepFetchedLocked(std::move(fetch));
      idle_cv_.notify_all();
      continue;
    }
    if (!stale_.empty()) {
      std::vector<std::string> stale;
      stale.swap(stale_);
      lock.unlock();
      {
        std::lock_guard<std::mutex> io(io_mu_);
        std::lock_guard<std::mutex> relock(mu_);
        for (const std::string& path : stale) {
          removing_.erase(path);
          if (pending_.contains(path)) continue;  // written again since: that write lands later
          if (records_.contains(path)) {
            RemoveLocked(path);
            SyncDir(path.substr(0, path.rfind('/')));  // a deleted conversation stays deleted
          }
        }
      }
      lock.lock();
      idle_cv_.notify_all();
      continue;
    }
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    const std::string path = std::move(queue_.front());
    queue_.pop_front();
    const auto it = pending_.find(path);
    if (it == pending_.end()) continue;  // removed while it waited
    const std::shared_ptr<const Job> job = it->second;
    in_flight_ = path;
    lock.unlock();
    {
      std::lock_guard<std::mutex> io(io_mu_);
      const StatusOr<int64_t> written = WriteFile(*job, path);
      std::lock_guard<std::mutex> relock(mu_);
      if (written.ok()) {
        IndexLocked(path, *written);
        EnforceBoundLocked(path);
        writing_ = true;
      } else {
        ++write_failures_;
        writing_ = false;
        LOG_WARN("state record {} not saved: {}", path, written.status().message());
      }
      if (const auto now = pending_.find(path); now != pending_.end() && now->second == job) DropPendingLocked(path);
      in_flight_.clear();
    }
    lock.lock();
    idle_cv_.notify_all();
  }
}

void StateDir::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return (queue_.empty() && in_flight_.empty() && stale_.empty()) || writer_stopped_; });
}

StateDir::~StateDir() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // the queue is drained first: a session saved at shutdown lands
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

StatusOr<int64_t> StateDir::WriteFile(const Job& job, const std::string& path) {
  std::string head(kMagic, sizeof(kMagic));
  head.append(job.identity);
  Append(&head, static_cast<uint32_t>(job.key.size()));
  head.append(job.key);
  Append(&head, static_cast<uint64_t>(job.payload.size()));
  Sha256Stream h;
  h.Add(head);
  h.Add(job.payload);
  const std::string checksum = h.Finish();
  const std::string sub = dir_ + "/" + job.kind;
  if (!MakePrivateDir(sub, /*tighten=*/false)) return InternalError("could not create " + sub);
  // Written to a temporary name, flushed to the disk, then renamed and the rename flushed: a
  // crash or power loss leaves the old record or the new one, never a torn one.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return InternalError("could not create " + tmp + ": " + std::strerror(errno));
  const bool written = WriteAll(fd, head) && WriteAll(fd, job.payload) && WriteAll(fd, checksum) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(written ? errno : write_errno);
    ::unlink(tmp.c_str());
    return InternalError("could not write " + path + ": " + why);
  }
  SyncDir(sub);
  return static_cast<int64_t>(head.size() + job.payload.size() + checksum.size());
}

std::optional<std::optional<std::string>> StateDir::AnswerLocked(const std::string& path, std::string_view key,
                                                                std::string_view identity) {
  // A record still waiting for the writer is the newest.
  if (const auto it = pending_.find(path); it != pending_.end()) {
    const Job& job = *it->second;
    if (job.key != key || job.identity != identity) return std::optional<std::string>();
    return std::optional<std::string>(job.payload);
  }
  if (const auto it = fetched_.find(path); it != fetched_.end()) {
    Fetch fetch = std::move(it->second);
    ForgetFetchedLocked(path);
    if (fetch.key == key && fetch.identity == identity) return std::move(fetch.payload);
  }
  if (!records_.contains(path) || removing_.contains(path)) return std::optional<std::string>();  // the index knows all
  return std::nullopt;
}

std::optional<std::string> StateDir::Read(std::string_view kind, std::string_view key, std::string_view identity) {
  const std::string path = PathOf(kind, key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto answer = AnswerLocked(path, key, identity)) return *std::move(answer);
  }
  std::lock_guard<std::mutex> io(io_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto answer = AnswerLocked(path, key, identity)) return *std::move(answer);  // written in between
  }
  return ReadFile(path, key, identity);
}

bool StateDir::Prefetch(std::string_view kind, std::string_view key, std::string_view identity) {
  const std::string path = PathOf(kind, key);
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.contains(path) || fetched_.contains(path) || !records_.contains(path) || removing_.contains(path)) {
    return true;
  }
  if (fetching_.insert(path).second) {
    reads_.push_back({path, std::string(key), std::string(identity), std::nullopt});
    cv_.notify_all();
  }
  return false;
}

void StateDir::KeepFetchedLocked(Fetch fetch) {
  ForgetFetchedLocked(fetch.path);
  const std::string path = fetch.path;
  fetched_bytes_ += fetch.payload ? static_cast<int64_t>(fetch.payload->size()) : 0;
  fetched_.emplace(path, std::move(fetch));
  fetched_order_.push_back(path);
  while (fetched_bytes_ > kMaxPendingBytes && fetched_order_.size() > 1) {
    const std::string oldest = std::move(fetched_order_.front());
    fetched_order_.pop_front();
    if (oldest != path) ForgetFetchedLocked(oldest);  // its reader reads the disk itself
  }
}

void StateDir::ForgetFetchedLocked(const std::string& path) {
  const auto it = fetched_.find(path);
  if (it == fetched_.end()) return;
  fetched_bytes_ -= it->second.payload ? static_cast<int64_t>(it->second.payload->size()) : 0;
  fetched_.erase(it);
  if (fetched_.empty()) fetched_order_.clear();
}

std::optional<std::string> StateDir::ReadFile(const std::string& path, std::string_view key, std::string_view identity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!records_.contains(path) || removing_.contains(path)) return std::nullopt;
  }
  // The file is read and checked without mu_: writes (the engine thread's) queue meanwhile.
  std::string data;
  {
    // Regular files only: a FIFO, device or directory placed at a record's path must neither
    // block this thread nor be read whole into memory.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    const int64_t cap = max_bytes_ > 0 ? max_bytes_ : int64_t{1} << 40;
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > cap) {
      if (fd >= 0) ::close(fd);
      LOG_WARN("state file {} ignored: not a regular file of at most {} bytes", path, cap);
      std::lock_guard<std::mutex> lock(mu_);
      UnindexLocked(path);
      return std::nullopt;
    }
    data.resize(static_cast<size_t>(st.st_size));
    size_t at = 0;
    while (at < data.size()) {
      const ssize_t n = ::read(fd, data.data() + at, data.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    data.resize(at);  // shorter than its size said: rejected as truncated below
    ::futimens(fd, nullptr);  // recently used, also for the order after a restart
    ::close(fd);
  }
  auto reject = [&](const char* why) -> std::optional<std::string> {
    LOG_WARN("state file {} ignored and removed: {}", path, why);
    std::lock_guard<std::mutex> lock(mu_);
    RemoveLocked(path);
    return std::nullopt;
  };
  const size_t fixed = sizeof(kMagic) + kHashBytes + sizeof(uint32_t) + sizeof(uint64_t) + kHashBytes;
  if (data.size() < fixed) return reject("truncated");
  if (Sha256(std::string_view(data).substr(0, data.size() - kHashBytes)) !=
      std::string_view(data).substr(data.size() - kHashBytes)) {
    return reject("checksum mismatch (corrupt or truncated)");
  }
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) return reject("not a kvserve state record");
  size_t at = sizeof(kMagic);
  if (data.compare(at, kHashBytes, identity) != 0) {
    return reject("written for another model, KV layout or format version");
  }
  at += kHashBytes;
  uint32_t key_len = 0;
  std::memcpy(&key_len, data.data() + at, sizeof(key_len));
  at += sizeof(key_len);
  if (key_len > data.size() - fixed) return reject("bad key length");
  if (data.compare(at, key_len, key) != 0 || key_len != key.size()) {
    // Another key with the same hash: not this caller's record (leave it).
    LOG_WARN("state file {} belongs to another key", path);
    return std::nullopt;
  }
  at += key_len;
  uint64_t payload_len = 0;
  std::memcpy(&payload_len, data.data() + at, sizeof(payload_len));
  at += sizeof(payload_len);
  if (payload_len != data.size() - at - kHashBytes) return reject("bad payload length");
  {
    std::lock_guard<std::mutex> lock(mu_);
    IndexLocked(path, static_cast<int64_t>(data.size()));  // now the most recently used
  }
  data.resize(data.size() - kHashBytes);
  data.erase(0, at);
  return data;
}

bool StateDir::Remove(std::string_view kind, std::string_view key) {
  const std::string path = PathOf(kind, key);
  std::lock_guard<std::mutex> lock(mu_);
  const bool had = pending_.contains(path) || (records_.contains(path) && !removing_.contains(path)) || path == in_flight_;
  RemoveLaterLocked(path);
  cv_.notify_all();
  return had;
}

void StateDir::RemoveLaterLocked(const std::string& path) {
  // The file goes on the writer thread, after any write of it in flight; until then Read
  // treats it as gone.
  DropPendingLocked(path);
  ForgetFetchedLocked(path);
  removing_.insert(path);
  stale_.push_back(path);
}

int64_t StateDir::used_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

void StateDir::EnforceBoundLocked(const std::string& keep) {
  if (max_bytes_ <= 0) return;
  // Least recently used first, from the index: never a scan of the directory.
  for (auto it = by_use_.begin(); total_bytes_ > max_bytes_ && it != by_use_.end();) {
    const std::string path = it->second;
    ++it;
    if (path != keep) RemoveLocked(path);
  }
}

}  // namespace kvserve
