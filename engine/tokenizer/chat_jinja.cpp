// ChatTemplate with the model's own Jinja template (chat_template.h, "The model's template"):
// the chat as transformers' apply_chat_template passes it to the template, rendered by the
// Jinja engine (engine/jinja).
//
// Only the template's markup may become control tokens. Every string the client gave (content,
// names, arguments, tools) reaches the template with each control token's text in it replaced
// by a marker, a code point of Unicode's private-use plane 15 that names the text; the
// rendered text gets the texts back, each marked as a literal range (tokenized as text),
// wherever the template moved, quoted or escaped the string that carried it. Plane-15 code
// points the client sent are passed through markers too, so every marker is one of ours.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/jinja/jinja.h"
#include "engine/jinja/utf8.h"
#include "engine/tokenizer/chat_template.h"

namespace kvserve {
namespace {

using jinja::Dict;
using jinja::List;
using jinja::Value;

constexpr uint32_t kMarkerBase = 0xF0000;  // plane 15: U+F0000..U+FFFFD
constexpr size_t kMaxMarkers = 0xFFFFD - kMarkerBase + 1;

// Replaces control-token texts (and plane-15 code points) in client strings by markers, and
// puts them back in the rendered text.
class Markers {
 public:
  // `control_texts`: by first byte, longest first (ChatTemplate::control_texts_).
  explicit Markers(const std::vector<std::vector<std::string>>& control_texts) : texts_(control_texts) {}

  std::string EscapeText(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      size_t len = 1;
      const uint32_t cp = jinja::DecodeCodePoint(s, i, &len);
      std::string_view original;
      if (cp >= kMarkerBase && cp <= 0xFFFFD) {
        original = s.substr(i, len);
      } else {
        const size_t bucket = static_cast<unsigned char>(s[i]);
        for (const std::string& t : bucket < texts_.size() ? texts_[bucket] : kNone) {  // longest first
          if (s.compare(i, t.size(), t) == 0) {
            original = t;
            break;
          }
        }
      }
      if (original.empty()) {
        out.append(s.substr(i, len));
        i += len;
        continue;
      }
      if (originals_.size() >= kMaxMarkers) {
        overflow_ = true;
        out.append(original);
      } else {
        jinja::AppendCodePoint(kMarkerBase + static_cast<uint32_t>(originals_.size()), &out);
        originals_.emplace_back(original);
      }
      i += original.size();
    }
    return out;
  }

  // Strings of `v`, recursively (dict keys too).
  Value Escape(const Value& v) {
    if (v.is_string()) return Value(EscapeText(v.str()));
    if (v.is_list()) {
      List items;
      for (const Value& item : v.list()) items.push_back(Escape(item));
      return Value::FromList(std::move(items), v.is_tuple());
    }
    if (v.is_dict()) {
      Dict items;
      for (const auto& [k, item] : v.dict()) items.emplace_back(Escape(k), Escape(item));
      return Value::FromDict(std::move(items));
    }
    return v;
  }

  // The rendered text with the originals back, and where they are.
  RenderedChat Restore(std::string_view text) const {
    RenderedChat out;
    out.text.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      size_t len = 1;
      const uint32_t cp = jinja::DecodeCodePoint(text, i, &len);
      const size_t k = cp - kMarkerBase;
      if (cp >= kMarkerBase && k < originals_.size()) {
        out.content.push_back({out.text.size(), out.text.size() + originals_[k].size()});
        out.text += originals_[k];
      } else {
        out.text.append(text.substr(i, len));
      }
      i += len;
    }
    return out;
  }

  bool overflow() const { return overflow_; }

 private:
  inline static const std::vector<std::string> kNone;
  const std::vector<std::vector<std::string>>& texts_;
  std::vector<std::string> originals_;
  bool overflow_ = false;
};

// A tool call as OpenAI clients send it back, with `arguments` as the object it encodes (as
// vLLM gives templates, which iterate it with |items) or, when it is not a JSON object, as
// the text.
// the text (always, for templates that concatenate it as text: `as_text`).
Value ToolCallValue(const ChatToolCall& c, bool as_text) {
  std::optional<Value> arguments = as_text ? std::nullopt : jinja::ParseJson(c.arguments);
  Dict function;
  function.emplace_back("name", Value(c.name));
  function.emplace_back("arguments", arguments && arguments->is_dict() ? *arguments : Value(c.arguments));
  Dict call;
  if (!c.id.empty()) call.emplace_back("id", Value(c.id));
  call.emplace_back("type", Value("function"));
  call.emplace_back("function", Value::FromDict(std::move(function)));
  return Value::FromDict(std::move(call));
}

Value MessageValue(const ChatMessage& m, bool arguments_as_text) {
  Dict d;
  d.emplace_back("role", Value(m.role));
  d.emplace_back("content", Value(m.content));
  if (!m.tool_calls.empty()) {
    List calls;
    for (const ChatToolCall& c : m.tool_calls) calls.push_back(ToolCallValue(c, arguments_as_text));
    d.emplace_back("tool_calls", Value::FromList(std::move(calls)));
  }
  if (!m.reasoning_content.empty()) d.emplace_back("reasoning_content", Value(m.reasoning_content));
  if (!m.tool_call_id.empty()) d.emplace_back("tool_call_id", Value(m.tool_call_id));
  if (!m.name.empty()) d.emplace_back("name", Value(m.name));
  return Value::FromDict(std::move(d));
}

}  // namespace

StatusOr<ChatTemplate::JinjaTemplate> ChatTemplate::ParseJinja(std::string_view text) {
  ASSIGN_OR_RETURN(jinja::Template parsed, jinja::Template::Parse(text));
  return std::make_shared<const jinja::Template>(std::move(parsed));
}

StatusOr<RenderedChat> ChatTemplate::RenderJinja(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                                 std::span<const ChatTool> tools, const ChatExtras& extras) const {
  Markers markers(control_texts_);
  List message_values;
  for (const ChatMessage& m : messages) message_values.push_back(markers.Escape(MessageValue(m, arguments_as_text_)));
  Value tool_values = Value::None();
  if (!tools.empty()) {
    List items;
    for (const ChatTool& t : tools) {
      std::optional<Value> v = jinja::ParseJson(t.json);
      if (!v) return InvalidArgumentError("tool '" + t.name + "' is not valid JSON");
      items.push_back(markers.Escape(*v));
    }
    tool_values = Value::FromList(std::move(items));
  }
  Dict vars;
  vars.emplace_back("messages", Value::FromList(std::move(message_values)));
  vars.emplace_back("tools", tool_values);
  vars.emplace_back("documents", Value::None());
  vars.emplace_back("add_generation_prompt", Value(add_generation_prompt));
  vars.emplace_back("bos_token", Value(bos_));
  vars.emplace_back("eos_token", Value(eos_));
  if (!extras.variables_json.empty()) {
    // chat_template_kwargs: added, or replacing what kvserve set (as transformers merges them).
    std::optional<Value> kwargs = jinja::ParseJson(extras.variables_json);
    if (!kwargs || !kwargs->is_dict()) return InvalidArgumentError("chat_template_kwargs must be a JSON object");
    for (const auto& member : kwargs->dict()) {
      const Value& key = member.first;
      if (!key.is_string()) continue;
      const Value escaped = markers.Escape(member.second);
      auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& e) { return e.first.str() == key.str(); });
      if (it != vars.end()) it->second = escaped;
      else vars.emplace_back(key, escaped);
    }
  }
  if (markers.overflow()) return InvalidArgumentError("the messages hold too many control-token texts");
  ASSIGN_OR_RETURN(std::string text, jinja_->Render(Value::FromDict(std::move(vars))));
  return markers.Restore(text);
}

void ChatTemplate::DeriveTools() {
  std::vector<std::string> controls;
  for (const auto& bucket : control_texts_) controls.insert(controls.end(), bucket.begin(), bucket.end());
  const std::vector<ChatTool> tools = ToolProbeTools();
  const ToolProbeRender render = [&](std::span<const ChatMessage> messages, bool add_generation_prompt) {
    StatusOr<RenderedChat> r = RenderJinja(messages, add_generation_prompt, tools);
    return r.ok() ? StatusOr<std::string>(std::move(r->text)) : StatusOr<std::string>(r.status());
  };
  bool refused = false;
  std::optional<ToolSyntax> derived = DeriveToolSyntax(render, eos_, controls, &refused);
  if (refused) {  // a template that concatenates the arguments as text
    arguments_as_text_ = true;
    derived = DeriveToolSyntax(render, eos_, controls);
    arguments_as_text_ = derived.has_value();
  }
  jinja_renders_tools_ = derived.has_value();
  tool_syntax_ = derived ? *std::move(derived) : ToolSyntax::Generic();
  if (!derived) tool_format_ = ToolFormat::kGeneric;
}

}  // namespace kvserve
