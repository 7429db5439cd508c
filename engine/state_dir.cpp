// StateDir (see state_dir.h).
#include "engine/state_dir.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
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

class Sha256Stream {
 public:
  Sha256Stream() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256Stream() { EVP_MD_CTX_free(ctx_); }
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Add(const void* data, size_t n) { EVP_DigestUpdate(ctx_, data, n); }
  void Add(std::string_view s) { Add(s.data(), s.size()); }
  template <typename T>
  void AddValue(const T& v) { Add(&v, sizeof(v)); }
  std::string Finish() {
    std::string out(kHashBytes, '\0');
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, reinterpret_cast<unsigned char*>(out.data()), &n);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

std::string Sha256(std::string_view data) {
  Sha256Stream h;
  h.Add(data);
  return h.Finish();
}

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

StatusOr<std::unique_ptr<StateDir>> StateDir::Open(const std::string& dir, int64_t max_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return InvalidArgumentError("--state-dir: cannot create directory '" + dir + "': " + ec.message());
  }
  return std::unique_ptr<StateDir>(new StateDir(dir, max_bytes));
}

std::string StateDir::PathOf(std::string_view kind, std::string_view key) const {
  return dir_ + "/" + std::string(kind) + "/" + Hex(Sha256(key)) + ".rec";
}

Status StateDir::Write(std::string_view kind, std::string_view key, std::string_view identity,
                       std::string_view payload) {
  if (identity.size() != kHashBytes) return InvalidArgumentError("state identity must be 32 bytes");
  std::string head(kMagic, sizeof(kMagic));
  head.append(identity);
  Append(&head, static_cast<uint32_t>(key.size()));
  head.append(key);
  Append(&head, static_cast<uint64_t>(payload.size()));
  Sha256Stream h;
  h.Add(head);
  h.Add(payload);
  const std::string checksum = h.Finish();

  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = PathOf(kind, key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.write(checksum.data(), static_cast<std::streamsize>(checksum.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return InternalError("could not write " + tmp);
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return InternalError("could not rename " + tmp + ": " + ec.message());
  }
  EnforceBoundLocked(path);
  if (!fs::exists(path)) return ResourceExhaustedError("the record is larger than --state-max-bytes");
  return OkStatus();
}

std::optional<std::string> StateDir::Read(std::string_view kind, std::string_view key, std::string_view identity) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = PathOf(kind, key);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::string data;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    data.resize(static_cast<size_t>(std::max<std::streamoff>(0, in.tellg())));
    in.seekg(0);
    in.read(data.data(), static_cast<std::streamsize>(data.size()));
    if (!in) data.clear();  // unreadable: rejected as truncated below
  }
  auto reject = [&](const char* why) -> std::optional<std::string> {
    LOG_WARN("state file {} ignored and removed: {}", path, why);
    fs::remove(path, ec);
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
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recently used
  data.resize(data.size() - kHashBytes);
  data.erase(0, at);
  return data;
}

bool StateDir::Remove(std::string_view kind, std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  return fs::remove(PathOf(kind, key), ec);
}

int64_t StateDir::used_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir_, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".rec") total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

void StateDir::EnforceBoundLocked(const std::string& keep) {
  if (max_bytes_ <= 0) return;
  struct File {
    fs::file_time_type mtime;
    int64_t size;
    fs::path path;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir_, ec)) {
    if (!e.is_regular_file(ec) || e.path().extension() != ".rec") continue;
    files.push_back({e.last_write_time(ec), static_cast<int64_t>(e.file_size(ec)), e.path()});
    total += files.back().size;
  }
  if (total <= max_bytes_) return;
  // Oldest first; the record just written last of all.
  std::sort(files.begin(), files.end(), [&](const File& a, const File& b) {
    const bool ka = a.path == keep, kb = b.path == keep;
    return ka != kb ? kb : a.mtime < b.mtime;
  });
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    if (fs::remove(f.path, ec)) total -= f.size;
  }
}

}  // namespace kvserve
