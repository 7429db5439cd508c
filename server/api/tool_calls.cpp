// ToolCallParser (see tool_calls.h): reads calls back in the template's syntax.
#include "server/api/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;
using Match = ToolCallParser::Match;

constexpr size_t kMaxName = 256;            // a longer "name" is not a call
constexpr size_t kMaxParameterText = 1 << 20;  // markup of one argument, before its end shows

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}
bool IsPunct(char c) { return c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ','; }
bool IsIdChar(char c) { return IsNameChar(c) && c != '.'; }

// A JSON string of `s` (bytes that are not UTF-8 become U+FFFD: a model's text may cut one).
std::string Quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolSyntax syntax, std::span<const ToolDefinition> tools)
    : syntax_(std::move(syntax)), rng_(std::random_device{}()) {
  // A call that leaves out the id its template writes after the arguments (`, "id": "..."`).
  const size_t slot = syntax_.call_end.find(ToolSyntax::kIdSlot);
  const size_t comma = slot == std::string::npos ? slot : syntax_.call_end.rfind(',', slot);
  if (comma != std::string::npos && slot + 1 < syntax_.call_end.size() && syntax_.call_end[slot + 1] == '"') {
    call_end_without_id_ = syntax_.call_end.substr(0, comma) + syntax_.call_end.substr(slot + 2);
  }
  if (!syntax_.xml_arguments) return;
  for (const ToolDefinition& t : tools) {
    const json params = json::parse(t.parameters, nullptr, /*allow_exceptions=*/false);
    std::vector<std::string> strings;
    if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
      for (const auto& [key, schema] : params["properties"].items()) {
        if (schema.is_object() && schema.value("type", json()) == "string") strings.push_back(key);
      }
    }
    string_parameters_.emplace_back(t.chat.name, std::move(strings));
  }
}

std::string ToolCallParser::NewId() {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  // A template that writes ids wants ToolSyntax::kIdLength letters and digits (Mistral's 9);
  // OpenAI's ids are call_ + 24.
  const bool short_id = syntax_.has_id();
  std::string id = short_id ? "" : "call_";
  const int n = short_id ? ToolSyntax::kIdLength : 24;
  for (int i = 0; i < n; ++i) id += kAlnum[rng_() % (sizeof(kAlnum) - 1)];
  return id;
}

ToolCallParser::Match ToolCallParser::MatchAt(std::string_view literal, size_t* pos, std::string* id) const {
  const std::string_view s = buf_;
  size_t p = *pos;
  char prev = '\0';
  for (size_t i = 0; i < literal.size();) {
    const char c = literal[i];
    if (IsSpace(c)) {  // any whitespace, none too
      while (i < literal.size() && IsSpace(literal[i])) ++i;
      while (p < s.size() && IsSpace(s[p])) ++p;
      if (p == s.size()) return Match::kPartial;  // more whitespace may come
      prev = ' ';
      continue;
    }
    if (IsPunct(prev) || IsPunct(c)) {
      while (p < s.size() && IsSpace(s[p])) ++p;
    }
    if (p == s.size()) return Match::kPartial;
    if (c == ToolSyntax::kIdSlot || c == ToolSyntax::kIndexSlot) {
      const size_t start = p;
      while (p < s.size() && (c == ToolSyntax::kIdSlot ? IsIdChar(s[p]) : (s[p] >= '0' && s[p] <= '9'))) ++p;
      if (p == s.size()) return Match::kPartial;
      if (p == start) return Match::kNo;
      if (c == ToolSyntax::kIdSlot && id != nullptr) *id = std::string(s.substr(start, p - start));
    } else {
      if (s[p] != c) return Match::kNo;
      ++p;
    }
    prev = c;
    ++i;
  }
  *pos = p;
  return Match::kYes;
}

void ToolCallParser::Consume(size_t n) {
  call_text_.append(buf_, 0, n);
  buf_.erase(0, n);
}

void ToolCallParser::EmitContent(std::string_view text, Delta* out) {
  out->content.append(text);
  content_.append(text);
}

void ToolCallParser::Fail(Delta* out) {
  state_ = State::kFailed;
  EmitContent(call_text_, out);
  EmitContent(buf_, out);
  call_text_.clear();
  buf_.clear();
}

ToolCallParser::Delta ToolCallParser::Feed(std::string_view text) {
  Delta out;
  buf_.append(text);
  Run(&out);
  return out;
}

void ToolCallParser::Run(Delta* out) {
  if (syntax_.kind == ToolSyntax::Kind::kGeneric) return;  // one JSON value: read at Finish
  for (;;) {
    bool more = false;
    switch (state_) {
      case State::kFailed:
        EmitContent(buf_, out);
        buf_.clear();
        return;
      case State::kText: more = RunText(out); break;
      case State::kName: more = RunName(out); break;
      case State::kArguments: more = RunArguments(out); break;
      case State::kParameters: more = RunParameters(out); break;
      case State::kCallEnd: more = RunCallEnd(out); break;
      case State::kAfterCall: more = RunAfterCall(out); break;
    }
    if (!more) return;
  }
}

bool ToolCallParser::RunText(Delta* out) {
  const std::string list = syntax_.begin + syntax_.call_begin;
  size_t held = buf_.size();
  for (size_t at = buf_.find(list[0]); at != std::string::npos; at = buf_.find(list[0], at + 1)) {
    size_t p = at;
    const Match m = MatchAt(list, &p, &id_);
    if (m == Match::kNo) {
      id_.clear();  // an id read by a match that then failed is no call's
      continue;
    }
    if (m == Match::kPartial) {
      held = at;
      break;
    }
    // Whitespace before the calls is neither content nor the call's.
    size_t keep = at;
    while (keep > 0 && IsSpace(buf_[keep - 1])) --keep;
    EmitContent(std::string_view(buf_).substr(0, keep), out);
    buf_.erase(0, keep);
    call_text_.clear();
    Consume(p - keep);
    state_ = State::kName;
    return true;
  }
  // Held back: what may start the calls, and trailing whitespace (dropped if calls follow).
  size_t keep = held;
  while (keep > 0 && IsSpace(buf_[keep - 1])) --keep;
  EmitContent(std::string_view(buf_).substr(0, keep), out);
  buf_.erase(0, keep);
  return false;
}

bool ToolCallParser::RunName(Delta* out) {
  size_t p = 0;
  while (p < buf_.size() && IsNameChar(buf_[p])) ++p;
  if (p > kMaxName) {
    Fail(out);
    return false;
  }
  if (p == buf_.size()) return false;  // the name may go on
  if (p == 0) {
    Fail(out);
    return false;
  }
  std::string name = buf_.substr(0, p);
  const Match m = MatchAt(syntax_.name_end, &p, &id_);
  if (m != Match::kYes) {
    if (m == Match::kNo) Fail(out);
    return false;
  }
  Consume(p);
  current_ = ToolCall{id_.empty() ? NewId() : id_, std::move(name), ""};
  id_.clear();
  out->calls.push_back({static_cast<int>(calls_.size()), current_.id, current_.name, ""});
  nesting_ = JsonNesting{};
  parameters_ = 0;
  state_ = syntax_.xml_arguments ? State::kParameters : State::kArguments;
  return true;
}

void ToolCallParser::AddArguments(std::string_view fragment, Delta* out) {
  if (fragment.empty()) return;
  current_.arguments += fragment;
  if (!out->calls.empty() && out->calls.back().index == static_cast<int>(calls_.size())) {
    out->calls.back().arguments += fragment;
  } else {
    out->calls.push_back({static_cast<int>(calls_.size()), "", "", std::string(fragment)});
  }
}

bool ToolCallParser::RunArguments(Delta* out) {
  size_t i = 0;
  std::string fragment;
  for (; i < buf_.size(); ++i) {
    const char ch = buf_[i];
    if (current_.arguments.empty() && fragment.empty()) {
      if (IsSpace(ch)) continue;
      if (ch != '{') {
        Fail(out);
        return false;
      }
    }
    fragment += ch;
    if (nesting_.Step(ch) == 0) {
      ++i;
      break;
    }
  }
  Consume(i);
  AddArguments(fragment, out);
  if (nesting_.depth != 0 || current_.arguments.empty()) return false;  // more to come
  state_ = State::kCallEnd;
  return true;
}

std::string ToolCallParser::ParameterJson(const std::string& key, std::string value, bool json_value) const {
  for (const auto& [function, keys] : string_parameters_) {
    if (json_value) break;
    if (function == current_.name && std::find(keys.begin(), keys.end(), key) != keys.end()) return Quote(value);
  }
  const json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? Quote(value) : v.dump();
}

bool ToolCallParser::RunParameters(Delta* out) {
  size_t p = 0;
  while (p < buf_.size() && IsSpace(buf_[p])) ++p;
  if (p == buf_.size()) return false;
  const Match begin = MatchAt(syntax_.param_begin, &p, nullptr);
  if (begin == Match::kPartial) return false;
  if (begin == Match::kNo) {  // no more arguments
    AddArguments(parameters_ == 0 ? "{}" : "}", out);
    state_ = State::kCallEnd;
    return true;
  }
  // KEY mid VALUE end: the key ends where the mid's markup starts, the value where the end's.
  std::string_view mid = Trim(syntax_.param_mid);
  const std::string_view end = Trim(syntax_.param_end);
  size_t key_end = buf_.find(mid, p);
  bool json_value = false;
  if (!syntax_.param_mid_json.empty()) {
    const std::string_view mid_json = Trim(syntax_.param_mid_json);
    const size_t at = buf_.find(mid_json, p);
    if (at < key_end) {
      key_end = at;
      mid = mid_json;
      json_value = true;
    }
  }
  const size_t value_at = key_end == std::string::npos ? key_end : buf_.find(end, key_end + mid.size());
  if (value_at == std::string::npos) {
    if (buf_.size() > kMaxParameterText) Fail(out);
    return false;
  }
  const std::string key(Trim(std::string_view(buf_).substr(p, key_end - p)));
  size_t v = key_end + mid.size();
  const std::string& full_mid = json_value ? syntax_.param_mid_json : syntax_.param_mid;
  if (full_mid.back() == '\n' && v < value_at && buf_[v] == '\n') ++v;  // the markup's line break
  size_t v_end = value_at;
  if (syntax_.param_end.front() == '\n' && v_end > v && buf_[v_end - 1] == '\n') --v_end;
  size_t q = value_at + end.size();
  const std::string_view after_end = std::string_view(syntax_.param_end).substr(syntax_.param_end.find(end) + end.size());
  if (MatchAt(after_end, &q, nullptr) == Match::kPartial) return false;
  if (key.empty()) {
    Fail(out);
    return false;
  }
  const std::string value = ParameterJson(key, buf_.substr(v, v_end - v), json_value);
  AddArguments((parameters_++ == 0 ? "{" : ", ") + Quote(key) + ": " + value, out);
  Consume(q);
  return true;
}

void ToolCallParser::EndCall() {
  calls_.push_back(std::move(current_));
  current_ = ToolCall{};
  call_text_.clear();
}

bool ToolCallParser::RunCallEnd(Delta*) {
  size_t p = 0;
  Match m = MatchAt(syntax_.call_end, &p, &id_);
  if (m == Match::kNo && !call_end_without_id_.empty()) m = MatchAt(call_end_without_id_, &p, nullptr);
  if (m == Match::kPartial) return false;
  if (m == Match::kYes) buf_.erase(0, p);
  // Without its closing text the call stands; what follows is text again.
  EndCall();
  id_.clear();
  state_ = m == Match::kYes ? State::kAfterCall : State::kText;
  return true;
}

bool ToolCallParser::RunAfterCall(Delta*) {
  if (syntax_.parallel) {
    size_t p = 0;
    const Match next = MatchAt(syntax_.separator + syntax_.call_begin, &p, &id_);
    if (next == Match::kPartial) return false;
    if (next == Match::kYes) {
      Consume(p);
      state_ = State::kName;
      return true;
    }
  }
  size_t p = 0;
  const Match end = MatchAt(syntax_.end, &p, nullptr);
  if (end == Match::kPartial) return false;
  if (end == Match::kYes) buf_.erase(0, p);
  call_text_.clear();
  state_ = State::kText;
  return true;
}

ToolCallParser::Delta ToolCallParser::Finish() {
  Delta out;
  if (syntax_.kind == ToolSyntax::Kind::kGeneric) {
    const json v = json::parse(buf_, nullptr, /*allow_exceptions=*/false);
    auto add = [&](const json& call) {
      if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return false;
      const json args = call.contains("arguments") ? call["arguments"] : json::object();
      ToolCall t{NewId(), call["name"].get<std::string>(), args.dump()};
      out.calls.push_back({static_cast<int>(calls_.size()), t.id, t.name, t.arguments});
      calls_.push_back(std::move(t));
      return true;
    };
    bool parsed = false;
    if (v.is_object() && v.size() == 1) {
      if (v.contains("tool_call")) parsed = add(v["tool_call"]);
      if (v.contains("tool_calls") && v["tool_calls"].is_array()) {
        parsed = true;
        for (const json& call : v["tool_calls"]) parsed = add(call) && parsed;
      }
      if (v.contains("response") && v["response"].is_string()) {
        EmitContent(v["response"].get<std::string>(), &out);
        parsed = true;
      }
    }
    if (!parsed) {
      out.calls.clear();
      calls_.clear();
      EmitContent(buf_, &out);
    }
    buf_.clear();
    return out;
  }
  if (state_ == State::kParameters && (Trim(buf_).empty() || syntax_.call_end.starts_with(Trim(buf_)))) {
    AddArguments(parameters_ == 0 ? "{}" : "}", &out);  // the arguments ended with the text
    state_ = State::kCallEnd;
  }
  if (state_ == State::kCallEnd) {  // a call without (all of) its closing text
    EndCall();
    buf_.clear();
    state_ = State::kAfterCall;
  }
  if (state_ == State::kAfterCall) {  // the calls' closing text, cut short where the text ended
    if (Trim(buf_).empty() || syntax_.end.starts_with(Trim(buf_)) ||
        (syntax_.separator + syntax_.call_begin).starts_with(Trim(buf_))) {
      buf_.clear();
    }
    state_ = State::kText;
  }
  if (state_ == State::kText || state_ == State::kFailed) {
    const bool blank = std::all_of(buf_.begin(), buf_.end(), IsSpace);
    if (!(blank && !calls_.empty())) EmitContent(buf_, &out);
    buf_.clear();
  } else if (state_ == State::kName) {
    // The text ended before the call's name did: nothing of it went out, it is content.
    EmitContent(call_text_ + buf_, &out);
    call_text_.clear();
    buf_.clear();
    state_ = State::kFailed;
  } else {
    // The text ended inside a call (max_tokens): not a call. Its fragments went out already;
    // a complete response has its text as content.
    content_ += call_text_ + buf_;
    call_text_.clear();
    buf_.clear();
    state_ = State::kFailed;
  }
  return out;
}

}  // namespace kvserve
