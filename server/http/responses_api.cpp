// The Responses API's objects, events and store (see responses_api.h).
#include "server/http/responses_api.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"
#include "server/http/openai_format.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;


json OutputText(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json Message(const std::string& id, const char* status, const json& content) {
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

json Reasoning(const std::string& id, const char* status, const std::string& text) {
  return {{"id", id},
          {"type", "reasoning"},
          {"status", status},
          {"summary", json::array()},
          {"content", text.empty() ? json::array() : json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

}  // namespace

// ---- ResponsesTurn -----------------------------------------------------------------------------

ResponsesTurn::ResponsesTurn(ResponsesTurnInfo info, std::shared_ptr<ResponseStore> store, ReasoningFormat reasoning,
                             bool reasoning_open)
    : info_(std::move(info)),
      store_(std::move(store)),
      message_id_("msg_" + info_.id.substr(info_.id.find('_') + 1)),
      reasoning_id_("rs_" + info_.id.substr(info_.id.find('_') + 1)) {
  if (info_.store && store_) store_->Begin(info_.tenant, info_.id, info_.session_id);
  reasoning_ = MakeReasoningParser(reasoning, reasoning_open, nullptr);
}

ResponsesTurn::~ResponsesTurn() {
  if (info_.store && store_ && !ended_) store_->End(info_.tenant, info_.id);  // an error or a disconnect
}

bool ResponsesTurn::WillStore() { return info_.store && store_ && store_->WillStore(info_.tenant, info_.id); }

std::string ResponsesTurn::Object(const char* status, const RequestUsage* usage, std::optional<FinishReason> finish,
                                  bool stored) const {
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
            {"output", json::array()},
            {"parallel_tool_calls", true},
            {"previous_response_id", info_.previous_response_id.empty() ? json(nullptr)
                                                                        : json(info_.previous_response_id)},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", stored},
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
    if (!reasoning_text_.empty()) o["output"].push_back(Reasoning(reasoning_id_, "completed", reasoning_text_));
    o["output"].push_back(Message(message_id_, cut ? "incomplete" : "completed", json::array({OutputText(text_)})));
    o["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", usage->cached_prompt_tokens}}},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return DumpJson(o);
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
  const std::string pending = Object("in_progress", nullptr, std::nullopt, info_.store);
  out += Event("response.created", "\"response\":" + pending);
  out += Event("response.in_progress", "\"response\":" + pending);
  if (!reasoning_) out += OpenMessage();  // else when the content starts
  return out;
}

std::string ResponsesTurn::OpenMessage() {
  message_open_ = true;
  const std::string index = std::to_string(message_index());
  const json item = Message(message_id_, "in_progress", json::array());
  std::string out = Event("response.output_item.added", "\"output_index\":" + index + ",\"item\":" + DumpJson(item));
  const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  out += Event("response.content_part.added", "\"item_id\":" + DumpJson(message_id_) + ",\"output_index\":" + index +
                                                  ",\"content_index\":0,\"part\":" + DumpJson(part));
  return out;
}

std::string ResponsesTurn::CloseReasoning() {
  if (!reasoning_open_) return "";
  reasoning_open_ = false;
  const std::string where = "\"item_id\":" + DumpJson(reasoning_id_) + ",\"output_index\":0,\"content_index\":0";
  std::string out = Event("response.reasoning_text.done", where + ",\"text\":" + DumpJson(reasoning_text_));
  out += Event("response.output_item.done",
               "\"output_index\":0,\"item\":" + DumpJson(Reasoning(reasoning_id_, "completed", reasoning_text_)));
  return out;
}

std::string ResponsesTurn::ReasoningEvents(const std::string& text) {
  if (text.empty()) return "";
  std::string out;
  if (!reasoning_open_ && reasoning_text_.empty()) {
    reasoning_open_ = true;
    out += Event("response.output_item.added",
                 "\"output_index\":0,\"item\":" + DumpJson(Reasoning(reasoning_id_, "in_progress", "")));
  }
  reasoning_text_ += text;
  out += Event("response.reasoning_text.delta", "\"item_id\":" + DumpJson(reasoning_id_) +
                                                    ",\"output_index\":0,\"content_index\":0,\"delta\":" + DumpJson(text));
  return out;
}

std::string ResponsesTurn::ContentEvents(const std::string& text) {
  if (text.empty()) return "";
  std::string out = CloseReasoning();
  if (!message_open_) out += OpenMessage();
  text_ += text;
  out += Event("response.output_text.delta", "\"item_id\":" + DumpJson(message_id_) + ",\"output_index\":" +
                                                 std::to_string(message_index()) + ",\"content_index\":0,\"delta\":" +
                                                 DumpJson(text) + ",\"logprobs\":[]");
  return out;
}

std::string ResponsesTurn::DeltaEvent(const std::string& text) {
  if (!reasoning_) return ContentEvents(text);
  const ReasoningParser::Delta d = reasoning_->Feed(text);
  return ReasoningEvents(d.reasoning) + ContentEvents(d.content);
}

std::string ResponsesTurn::EndEvents(const RequestUsage& usage, std::optional<FinishReason> finish) {
  const bool cut = finish && *finish == FinishReason::kLength;
  std::string out;
  if (reasoning_) {
    const ReasoningParser::Delta d = reasoning_->Finish();
    out += ReasoningEvents(d.reasoning) + ContentEvents(d.content);
    out += CloseReasoning();
  }
  if (!message_open_) out += OpenMessage();
  const std::string index = std::to_string(message_index());
  const std::string where = "\"item_id\":" + DumpJson(message_id_) + ",\"output_index\":" + index + ",\"content_index\":0";
  out += Event("response.output_text.done", where + ",\"text\":" + DumpJson(text_) + ",\"logprobs\":[]");
  out += Event("response.content_part.done",
               where + ",\"part\":" + DumpJson({{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}));
  out += Event("response.output_item.done",
               "\"output_index\":" + index + ",\"item\":" +
                   DumpJson(Message(message_id_, cut ? "incomplete" : "completed", json::array({OutputText(text_)}))));
  const bool stored = WillStore();
  const std::string object = Object(cut ? "incomplete" : "completed", &usage, finish, stored);
  out += Event(cut ? "response.incomplete" : "response.completed", "\"response\":" + object);
  if (stored) Store(object);
  return out;
}

std::string ResponsesTurn::ErrorEvent(const ApiError& error) {
  const json fields = {{"code", error.code.empty() ? json(nullptr) : json(error.code)},
                       {"message", error.status.message()},
                       {"param", error.param.empty() ? json(nullptr) : json(error.param)}};
  std::string members = DumpJson(fields);
  return Event("error", members.substr(1, members.size() - 2));
}

std::string ResponsesTurn::FinalBody(const std::string& text, const RequestUsage& usage,
                                     std::optional<FinishReason> finish) {
  text_ = text;
  if (reasoning_) {
    (void)reasoning_->Feed(text);
    (void)reasoning_->Finish();
    reasoning_text_ = reasoning_->reasoning();
    text_ = reasoning_->content();
  }
  const bool cut = finish && *finish == FinishReason::kLength;
  const bool stored = WillStore();
  const std::string object = Object(cut ? "incomplete" : "completed", &usage, finish, stored);
  if (stored) Store(object);
  return object;
}

void ResponsesTurn::Store(const std::string& object) {
  StoredResponse r;
  r.id = info_.id;
  r.tenant = info_.tenant;
  r.session_id = info_.session_id;
  r.previous_id = info_.previous_response_id;
  r.input = info_.input;
  r.output = text_;
  r.object = object;
  store_->Put(std::move(r));
  ended_ = true;
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
  return DumpJson(list);
}

}  // namespace kvserve
