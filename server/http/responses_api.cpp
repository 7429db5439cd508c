// The Responses API's objects, events and store (see responses_api.h).
#include "server/http/responses_api.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"
#include "server/http/openai_format.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;

// Token pieces may split a UTF-8 character; the detokenizer never does, but be safe: JSON
// output must be valid UTF-8.
std::string DumpObject(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json OutputText(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json Message(const std::string& id, const char* status, const json& content) {
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

}  // namespace

// ---- ResponseStore -----------------------------------------------------------------------------

std::string ResponseStore::Key(const std::string& tenant, const std::string& id) {
  return std::to_string(tenant.size()) + ":" + tenant + id;
}

namespace {

constexpr std::string_view kDiskKind = "responses";
// Stored responses are plain JSON, valid for any model: their identity is the format's.
const std::string& DiskIdentity() {
  static const std::string identity = Sha256("kvserve stored response v1");
  return identity;
}

json MessagesJson(const std::vector<ChatMessage>& messages) {
  json out = json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

std::optional<StoredResponse> ParseStored(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    StoredResponse r;
    r.id = j.at("id").get<std::string>();
    r.tenant = j.at("tenant").get<std::string>();
    r.session_id = j.at("session_id").get<std::string>();
    for (const json& m : j.at("conversation")) r.conversation.push_back({m.at("role"), m.at("content")});
    for (const json& m : j.at("input")) r.input.push_back({m.at("role"), m.at("content")});
    r.object = j.at("object").get<std::string>();
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

void ResponseStore::PutLocked(const std::string& key, StoredResponse response) {
  if (responses_.insert_or_assign(key, std::move(response)).second) order_.push_back(key);
  while (responses_.size() > max_stored_ && !order_.empty()) {
    responses_.erase(order_.front());
    order_.pop_front();
  }
}

void ResponseStore::Put(StoredResponse response) {
  const std::string key = Key(response.tenant, response.id);
  if (disk_ != nullptr) {
    const json j = {{"id", response.id},
                    {"tenant", response.tenant},
                    {"session_id", response.session_id},
                    {"conversation", MessagesJson(response.conversation)},
                    {"input", MessagesJson(response.input)},
                    {"object", response.object}};
    if (Status st = disk_->Write(kDiskKind, key, DiskIdentity(), DumpObject(j)); !st.ok()) {
      LOG_WARN("a stored response was not written to the state directory: {}", st.message());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  PutLocked(key, std::move(response));
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& tenant, const std::string& id) {
  const std::string key = Key(tenant, id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = responses_.find(key);
    if (it != responses_.end()) return it->second;
  }
  if (disk_ == nullptr) return std::nullopt;
  std::optional<std::string> text = disk_->Read(kDiskKind, key, DiskIdentity());
  std::optional<StoredResponse> r = text ? ParseStored(*text) : std::nullopt;
  if (!r || r->tenant != tenant || r->id != id) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  PutLocked(key, *r);
  return r;
}

bool ResponseStore::Delete(const std::string& tenant, const std::string& id) {
  const std::string key = Key(tenant, id);
  const bool on_disk = Get(tenant, id).has_value();  // after a restart it is only there
  if (disk_ != nullptr) disk_->Remove(kDiskKind, key);
  std::lock_guard<std::mutex> lock(mu_);
  if (responses_.erase(key) == 0) return on_disk;
  std::erase(order_, key);
  return true;
}

// ---- ResponsesTurn -----------------------------------------------------------------------------

ResponsesTurn::ResponsesTurn(ResponsesTurnInfo info, std::shared_ptr<ResponseStore> store)
    : info_(std::move(info)), store_(std::move(store)), message_id_("msg_" + info_.id.substr(info_.id.find('_') + 1)) {}

std::string ResponsesTurn::Object(const char* status, const RequestUsage* usage,
                                  std::optional<FinishReason> finish) const {
  const bool done = usage != nullptr;
  const bool cut = finish && *finish == FinishReason::kLength;
  json o = {{"id", info_.id},
            {"object", "response"},
            {"created_at", info_.created_at},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
            {"instructions", info_.instructions ? json(*info_.instructions) : json(nullptr)},
            {"max_output_tokens", info_.max_output_tokens ? json(*info_.max_output_tokens) : json(nullptr)},
            {"model", info_.model},
            {"output", done ? json::array({Message(message_id_, cut ? "incomplete" : "completed",
                                                    json::array({OutputText(text_)}))})
                            : json::array()},
            {"parallel_tool_calls", true},
            {"previous_response_id", info_.previous_response_id.empty() ? json(nullptr)
                                                                        : json(info_.previous_response_id)},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", info_.store},
            {"temperature", info_.temperature},
            {"text", {{"format", {{"type", "text"}}}}},
            {"tool_choice", "auto"},
            {"tools", json::array()},
            {"top_p", info_.top_p},
            {"truncation", "disabled"},
            {"usage", nullptr},
            {"user", info_.user.empty() ? json(nullptr) : json(info_.user)},
            {"metadata", json::object()}};
  if (done) {
    o["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", usage->cached_prompt_tokens}}},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return DumpObject(o);
}

std::string ResponsesTurn::Event(const std::string& type, std::string fields_json) {
  // fields_json: a JSON object's members without braces, or "".
  std::string data = "{\"type\":\"" + type + "\",\"sequence_number\":" + std::to_string(sequence_++);
  if (!fields_json.empty()) data += "," + fields_json;
  data += "}";
  return "event: " + type + "\ndata: " + data + "\n\n";
}

std::string ResponsesTurn::StartEvents() {
  std::string out;
  const std::string pending = Object("in_progress", nullptr, std::nullopt);
  out += Event("response.created", "\"response\":" + pending);
  out += Event("response.in_progress", "\"response\":" + pending);
  const json item = Message(message_id_, "in_progress", json::array());
  out += Event("response.output_item.added", "\"output_index\":0,\"item\":" + DumpObject(item));
  const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  out += Event("response.content_part.added", "\"item_id\":" + DumpObject(message_id_) +
                                                  ",\"output_index\":0,\"content_index\":0,\"part\":" + DumpObject(part));
  return out;
}

std::string ResponsesTurn::DeltaEvent(const std::string& text) {
  text_ += text;
  return Event("response.output_text.delta", "\"item_id\":" + DumpObject(message_id_) +
                                                 ",\"output_index\":0,\"content_index\":0,\"delta\":" + DumpObject(text) +
                                                 ",\"logprobs\":[]");
}

std::string ResponsesTurn::EndEvents(const RequestUsage& usage, std::optional<FinishReason> finish) {
  const bool cut = finish && *finish == FinishReason::kLength;
  const std::string where = "\"item_id\":" + DumpObject(message_id_) + ",\"output_index\":0,\"content_index\":0";
  std::string out;
  out += Event("response.output_text.done", where + ",\"text\":" + DumpObject(text_) + ",\"logprobs\":[]");
  out += Event("response.content_part.done",
               where + ",\"part\":" + DumpObject({{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}));
  out += Event("response.output_item.done",
               "\"output_index\":0,\"item\":" +
                   DumpObject(Message(message_id_, cut ? "incomplete" : "completed", json::array({OutputText(text_)}))));
  const std::string object = Object(cut ? "incomplete" : "completed", &usage, finish);
  out += Event(cut ? "response.incomplete" : "response.completed", "\"response\":" + object);
  Store(object);
  return out;
}

std::string ResponsesTurn::ErrorEvent(const ApiError& error) {
  const json fields = {{"code", error.code.empty() ? json(nullptr) : json(error.code)},
                       {"message", error.status.message()},
                       {"param", error.param.empty() ? json(nullptr) : json(error.param)}};
  std::string members = DumpObject(fields);
  return Event("error", members.substr(1, members.size() - 2));
}

std::string ResponsesTurn::FinalBody(const std::string& text, const RequestUsage& usage,
                                     std::optional<FinishReason> finish) {
  text_ = text;
  const bool cut = finish && *finish == FinishReason::kLength;
  const std::string object = Object(cut ? "incomplete" : "completed", &usage, finish);
  Store(object);
  return object;
}

void ResponsesTurn::Store(const std::string& object) {
  if (!info_.store || !store_) return;
  StoredResponse r;
  r.id = info_.id;
  r.tenant = info_.tenant;
  r.session_id = info_.session_id;
  r.conversation = info_.conversation;
  r.conversation.push_back({"assistant", text_});
  r.input = info_.input;
  r.object = object;
  store_->Put(std::move(r));
}

std::string InputItemsJson(const StoredResponse& response, bool ascending) {
  json data = json::array();
  const std::string base = "msg_" + response.id.substr(response.id.find('_') + 1) + "_in";
  for (size_t i = 0; i < response.input.size(); ++i) {
    const ChatMessage& m = response.input[i];
    const bool assistant = m.role == "assistant";
    data.push_back({{"id", base + std::to_string(i)},
                    {"type", "message"},
                    {"status", "completed"},
                    {"role", m.role},
                    {"content", json::array({{{"type", assistant ? "output_text" : "input_text"}, {"text", m.content}}})}});
  }
  if (!ascending) std::reverse(data.begin(), data.end());
  json list = {{"object", "list"},
               {"data", data},
               {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
               {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
               {"has_more", false}};
  return DumpObject(list);
}

}  // namespace kvserve
