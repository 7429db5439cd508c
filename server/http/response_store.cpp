// ResponseStore (see response_store.h).
#include "server/http/response_store.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"
#include "server/http/openai_format.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kDiskKind = "responses";
// Stored responses are plain JSON, valid for any model: their identity is the format's (v2:
// deltas; a v1 record, a whole conversation, is ignored and removed).
const std::string& DiskIdentity() {
  static const std::string identity = Sha256("kvserve stored response v2");
  return identity;
}

std::string ToDisk(const StoredResponse& r) {
  json input = json::array();
  for (const ChatMessage& m : r.input) input.push_back({{"role", m.role}, {"content", m.content}});
  return DumpJson({{"id", r.id},
               {"tenant", r.tenant},
               {"session_id", r.session_id},
               {"previous_id", r.previous_id},
               {"input", input},
               {"output", r.output},
               {"object", r.object}});
}

std::optional<StoredResponse> FromDisk(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    StoredResponse r;
    r.id = j.at("id").get<std::string>();
    r.tenant = j.at("tenant").get<std::string>();
    r.session_id = j.at("session_id").get<std::string>();
    r.previous_id = j.at("previous_id").get<std::string>();
    for (const json& m : j.at("input")) r.input.push_back({m.at("role"), m.at("content")});
    r.output = j.at("output").get<std::string>();
    r.object = j.at("object").get<std::string>();
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int64_t StoredResponse::Bytes() const {
  int64_t n = static_cast<int64_t>(sizeof(StoredResponse) + id.size() + tenant.size() + session_id.size() +
                                   previous_id.size() + output.size() + object.size());
  for (const ChatMessage& m : input) n += static_cast<int64_t>(sizeof(ChatMessage) + m.role.size() + m.content.size());
  return n;
}

std::string ResponseStore::Key(const std::string& tenant, const std::string& id) {
  return std::to_string(tenant.size()) + ":" + tenant + id;
}

void ResponseStore::Begin(const std::string& tenant, const std::string& id, const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_[Key(tenant, id)] = session_id;
}

bool ResponseStore::WillStore(const std::string& tenant, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = !deleted_.contains(Key(tenant, id)) && (disk_ == nullptr || disk_->writing());
  if (!ok) CountNotStoredLocked();
  return ok;
}

void ResponseStore::End(const std::string& tenant, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = Key(tenant, id);
  running_.erase(key);
  deleted_.erase(key);
}

void ResponseStore::Put(StoredResponse response) {
  const std::string key = Key(response.tenant, response.id);
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(key);
  if (deleted_.erase(key) > 0) return;  // deleted while it ran: never stored
  if (disk_ != nullptr) {
    if (Status st = disk_->Write(kDiskKind, key, DiskIdentity(), ToDisk(response)); !st.ok()) {
      CountNotStoredLocked();
      LOG_WARN("a stored response was not written to the state directory: {}", st.message());
    }
  }
  InsertLocked(key, std::move(response));
}

void ResponseStore::InsertLocked(const std::string& key, StoredResponse response) {
  EraseLocked(key, /*from_disk=*/false);
  const std::string tenant = response.tenant;
  const int64_t bytes = response.Bytes();
  order_.push_back(key);
  entries_.emplace(key, Entry{std::move(response), bytes, std::prev(order_.end())});
  tenant_order_[tenant].push_back(key);
  tenant_bytes_[tenant] += bytes;
  bytes_ += bytes;
  // The key's own oldest first, then anyone's; the newest response always stays.
  std::deque<std::string>& mine = tenant_order_[tenant];
  while (tenant_bytes_[tenant] > limits_.max_bytes_per_key && mine.size() > 1) {
    const std::string oldest = mine.front();
    mine.pop_front();
    if (oldest != key && entries_.contains(oldest)) EraseLocked(oldest, /*from_disk=*/true);
  }
  while (bytes_ > limits_.max_bytes && order_.size() > 1 && order_.front() != key) {
    EraseLocked(order_.front(), /*from_disk=*/true);
  }
}

void ResponseStore::EraseLocked(const std::string& key, bool from_disk) {
  const auto it = entries_.find(key);
  if (it != entries_.end()) {
    const std::string& tenant = it->second.response.tenant;
    tenant_bytes_[tenant] -= it->second.bytes;
    if (tenant_bytes_[tenant] <= 0) {
      tenant_bytes_.erase(tenant);
      tenant_order_.erase(tenant);
    }
    bytes_ -= it->second.bytes;
    order_.erase(it->second.order);
    entries_.erase(it);
  }
  if (from_disk && disk_ != nullptr) disk_->Remove(kDiskKind, key);
}

std::optional<StoredResponse> ResponseStore::ReadDisk(const std::string& tenant, const std::string& id) {
  if (disk_ == nullptr) return std::nullopt;
  const std::optional<std::string> text = disk_->Read(kDiskKind, Key(tenant, id), DiskIdentity());
  std::optional<StoredResponse> r = text ? FromDisk(*text) : std::nullopt;
  if (!r || r->tenant != tenant || r->id != id) return std::nullopt;
  return r;
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& tenant, const std::string& id) {
  const std::string key = Key(tenant, id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = entries_.find(key); it != entries_.end()) return it->second.response;
  }
  std::optional<StoredResponse> r = ReadDisk(tenant, id);  // after a restart it is only there
  if (!r) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (!entries_.contains(key)) InsertLocked(key, *r);
  return r;
}

std::optional<std::vector<ChatMessage>> ResponseStore::Conversation(const std::string& tenant, const std::string& id) {
  std::vector<std::vector<ChatMessage>> turns;  // newest first
  std::string at = id;
  for (size_t depth = 0; !at.empty(); ++depth) {
    std::optional<StoredResponse> r = Get(tenant, at);
    if (!r || depth > 100000) return std::nullopt;
    std::vector<ChatMessage> turn = std::move(r->input);
    turn.push_back({"assistant", std::move(r->output)});
    turns.push_back(std::move(turn));
    at = r->previous_id;
  }
  std::vector<ChatMessage> out;
  for (auto it = turns.rbegin(); it != turns.rend(); ++it) out.insert(out.end(), it->begin(), it->end());
  return out;
}

std::optional<std::string> ResponseStore::Delete(const std::string& tenant, const std::string& id) {
  const std::string key = Key(tenant, id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = running_.find(key); it != running_.end()) {
      deleted_.insert(key);  // never stored when it completes
      return it->second;
    }
  }
  const std::optional<StoredResponse> r = Get(tenant, id);
  if (!r) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  EraseLocked(key, /*from_disk=*/true);
  return r->session_id;
}

int64_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t ResponseStore::bytes_of(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = tenant_bytes_.find(tenant);
  return it == tenant_bytes_.end() ? 0 : it->second;
}

void ResponseStore::CountNotStoredLocked() {
  ++not_stored_;
  if (limits_.not_stored_total != nullptr) limits_.not_stored_total->fetch_add(1, std::memory_order_relaxed);
}

int64_t ResponseStore::not_stored() const {
  std::lock_guard<std::mutex> lock(mu_);
  return not_stored_;
}

}  // namespace kvserve
