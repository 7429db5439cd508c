// ToolCallSpec and ToolCallParser (see tool_calls.h).
#include "server/api/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;
using Choice = ToolRequest::Choice;

// JSON whitespace allowed per gap in a call: enough for `{"name": "f", "arguments": {...}}`,
// the spacing the templates render calls with, and no room to wander.
constexpr int kToolWhitespace = 1;

// {"name": <const>, <key>: <parameters>}, in that order, nothing else.
json CallSchema(const ToolDefinition& tool, const char* arguments_key) {
  json parameters = json::parse(tool.parameters, nullptr, /*allow_exceptions=*/false);
  if (tool.parameters.empty() || parameters.is_discarded()) parameters = json{{"type", "object"}};
  json properties = json::object();
  properties["name"] = json{{"const", tool.chat.name}};
  properties[arguments_key] = std::move(parameters);
  return json{{"type", "object"},
              {"properties", std::move(properties)},
              {"required", json::array({"name", arguments_key})},
              {"additionalProperties", false}};
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

const char* Opener(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return "<tool_call>";
    case ToolFormat::kMistral: return "[TOOL_CALLS]";
    case ToolFormat::kLlama31: return "{\"name\"";
    case ToolFormat::kGeneric: break;
  }
  return "";
}

// Where a suffix of `text` that is a proper prefix of `opener` starts (text.size() if none).
size_t HeldFrom(std::string_view text, std::string_view opener) {
  for (size_t n = std::min(text.size(), opener.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == opener.substr(0, n)) return text.size() - n;
  }
  return text.size();
}

// A cursor over the head of a call: false when the text ends first (`more`) or differs.
struct Cursor {
  std::string_view s;
  size_t p = 0;
  bool more = false;

  void Space() {
    while (p < s.size() && IsSpace(s[p])) ++p;
  }
  bool Literal(std::string_view lit) {
    Space();
    const std::string_view rest = s.substr(p);
    if (rest.size() < lit.size()) {
      more = lit.substr(0, rest.size()) == rest;
      return false;
    }
    if (rest.substr(0, lit.size()) != lit) return false;
    p += lit.size();
    return true;
  }
  // A JSON string, decoded by nlohmann.
  bool String(std::string* out) {
    Space();
    if (p >= s.size()) return (more = true, false);
    if (s[p] != '"') return false;
    for (size_t i = p + 1; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == '"') {
        const json v = json::parse(s.substr(p, i + 1 - p), nullptr, false);
        if (!v.is_string()) return false;
        *out = v.get<std::string>();
        p = i + 1;
        return true;
      }
    }
    more = true;
    return false;
  }
};

}  // namespace

StructuredOutputSpec ToolCallSpec(ToolFormat format, const ToolRequest& request) {
  std::vector<const ToolDefinition*> allowed;
  for (const ToolDefinition& t : request.tools) {
    if (request.choice != Choice::kFunction || t.chat.name == request.function) allowed.push_back(&t);
  }
  const char* key = format == ToolFormat::kLlama31 ? "parameters" : "arguments";
  json calls = json::array();
  for (const ToolDefinition* t : allowed) calls.push_back(CallSchema(*t, key));
  json call = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  const bool strict = std::all_of(allowed.begin(), allowed.end(), [](const ToolDefinition* t) { return t->strict; });
  const bool parallel = request.parallel && request.choice != Choice::kFunction;
  const bool lazy = request.choice == Choice::kAuto;

  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.lenient = !strict;
  spec.max_whitespace = kToolWhitespace;
  StructuredOutputSpec::Frame& f = spec.frame;
  switch (format) {
    case ToolFormat::kHermes:
      f.item_prefix = "<tool_call>\n";
      f.item_suffix = "\n</tool_call>";
      f.separator = "\n";
      f.max_items = parallel ? -1 : 1;
      break;
    case ToolFormat::kMistral:
      f.prefix = "[TOOL_CALLS] [";
      f.separator = ", ";
      f.suffix = "]";
      f.max_items = parallel ? -1 : 1;
      break;
    case ToolFormat::kLlama31:
      break;  // one call, the whole reply
    case ToolFormat::kGeneric: {
      json answer = parallel ? json{{"type", "object"},
                                    {"properties", {{"tool_calls", {{"type", "array"}, {"items", call}, {"minItems", 1}}}}},
                                    {"required", {"tool_calls"}},
                                    {"additionalProperties", false}}
                             : json{{"type", "object"},
                                    {"properties", {{"tool_call", call}}},
                                    {"required", {"tool_call"}},
                                    {"additionalProperties", false}};
      if (lazy) {
        json response = {{"type", "object"},
                         {"properties", {{"response", {{"type", "string"}}}}},
                         {"required", {"response"}},
                         {"additionalProperties", false}};
        answer = json{{"anyOf", {std::move(answer), std::move(response)}}};
      }
      spec.text = answer.dump();
      return spec;  // the whole reply is JSON: no trigger
    }
  }
  spec.text = call.dump();
  if (lazy) spec.triggers = {Opener(format)};
  return spec;
}

ToolCallParser::ToolCallParser(ToolFormat format) : format_(format), rng_(std::random_device{}()) {}

std::string ToolCallParser::NewId() {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  // Mistral's template wants 9 alphanumeric characters; OpenAI's ids are call_ + 24.
  std::string id = format_ == ToolFormat::kMistral ? "" : "call_";
  const int n = format_ == ToolFormat::kMistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kAlnum[rng_() % (sizeof(kAlnum) - 1)];
  return id;
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

size_t ToolCallParser::FindOpener(size_t* held) const {
  const std::string_view opener = Opener(format_);
  *held = buf_.size();
  if (format_ != ToolFormat::kLlama31) {
    const size_t at = buf_.find(opener);
    if (at == std::string::npos) *held = HeldFrom(buf_, opener);
    return at;
  }
  // Llama: '{' then "name", whitespace allowed between them.
  for (size_t at = buf_.find('{'); at != std::string::npos; at = buf_.find('{', at + 1)) {
    Cursor c{std::string_view(buf_).substr(at + 1)};
    if (c.Literal("\"name\"")) return at;
    if (c.more) {
      *held = at;
      return std::string::npos;
    }
  }
  return std::string::npos;
}

void ToolCallParser::Run(Delta* out) {
  if (format_ == ToolFormat::kGeneric) return;  // one JSON value: read at Finish
  size_t held = 0;
  for (;;) {
    switch (state_) {
      case State::kFailed:
        EmitContent(buf_, out);
        buf_.clear();
        return;
      case State::kText: {
        const std::string_view opener = Opener(format_);
        const size_t at = FindOpener(&held);
        if (at == std::string::npos) {
          // Held back: what may start an opener, and trailing whitespace (dropped if a call
          // follows).
          size_t keep = held;
          while (keep > 0 && IsSpace(buf_[keep - 1])) --keep;
          EmitContent(std::string_view(buf_).substr(0, keep), out);
          buf_.erase(0, keep);
          return;
        }
        size_t keep = at;
        while (keep > 0 && IsSpace(buf_[keep - 1])) --keep;
        EmitContent(std::string_view(buf_).substr(0, keep), out);
        // The call's text (kept for Fail) starts with the whitespace before it.
        const size_t opener_size = format_ == ToolFormat::kLlama31 ? 0 : opener.size();  // Llama's is the call's start
        call_text_ = buf_.substr(keep, at - keep + opener_size);
        buf_.erase(0, at + opener_size);
        state_ = State::kHead;
        break;
      }
      case State::kHead:
        if (!RunHead(out)) return;
        break;
      case State::kArguments:
        if (!RunArguments(out)) return;
        break;
      case State::kTail:
        if (!RunTail()) return;
        break;
    }
  }
}

bool ToolCallParser::RunHead(Delta* out) {
  Cursor c{buf_};
  std::string name;
  const char* key = format_ == ToolFormat::kLlama31 ? "\"parameters\"" : "\"arguments\"";
  bool ok = true;
  if (format_ == ToolFormat::kMistral && !in_list_) ok = c.Literal("[");
  ok = ok && c.Literal("{") && c.Literal("\"name\"") && c.Literal(":") && c.String(&name) && c.Literal(",") &&
       c.Literal(key) && c.Literal(":");
  if (!ok) {
    if (!c.more) Fail(out);
    return false;
  }
  in_list_ = format_ == ToolFormat::kMistral;
  call_text_.append(buf_, 0, c.p);
  buf_.erase(0, c.p);
  current_ = ToolCall{NewId(), std::move(name), ""};
  out->calls.push_back({static_cast<int>(calls_.size()), current_.id, current_.name, ""});
  nesting_ = JsonNesting{};
  state_ = State::kArguments;
  return true;
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
  call_text_.append(buf_, 0, i);
  buf_.erase(0, i);
  current_.arguments += fragment;
  if (!fragment.empty()) {
    if (!out->calls.empty() && out->calls.back().index == static_cast<int>(calls_.size())) {
      out->calls.back().arguments += fragment;
    } else {
      out->calls.push_back({static_cast<int>(calls_.size()), "", "", fragment});
    }
  }
  if (nesting_.depth != 0 || current_.arguments.empty()) return false;  // more to come
  nesting_ = JsonNesting{1};  // inside the call object
  state_ = State::kTail;
  return true;
}

bool ToolCallParser::RunTail() {
  size_t i = 0;
  for (; i < buf_.size() && nesting_.depth > 0; ++i) nesting_.Step(buf_[i]);  // keys after the arguments (an "id")
  call_text_.append(buf_, 0, i);
  buf_.erase(0, i);
  if (nesting_.depth > 0) return false;
  // After the call object: the family's closing text.
  Cursor c{buf_};
  if (format_ == ToolFormat::kHermes && !c.Literal("</tool_call>")) {
    if (c.more) return false;
  } else if (format_ == ToolFormat::kMistral) {
    if (c.Literal(",")) {
      in_list_ = true;
    } else if (c.Literal("]")) {
      in_list_ = false;
    } else if (c.more || c.p == buf_.size()) {
      return false;
    } else {
      in_list_ = false;  // not a list after all: text again
    }
  }
  buf_.erase(0, c.p);
  calls_.push_back(std::move(current_));
  current_ = ToolCall{};
  call_text_.clear();
  state_ = in_list_ ? State::kHead : State::kText;
  return true;
}

ToolCallParser::Delta ToolCallParser::Finish() {
  Delta out;
  if (format_ == ToolFormat::kGeneric) {
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
  if (state_ == State::kTail && nesting_.depth == 0) {  // a call without its closing text
    calls_.push_back(std::move(current_));
    state_ = State::kText;
  }
  if (state_ == State::kText || state_ == State::kFailed) {
    const bool blank = std::all_of(buf_.begin(), buf_.end(), IsSpace);
    if (!(blank && !calls_.empty())) EmitContent(buf_, &out);
    buf_.clear();
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
