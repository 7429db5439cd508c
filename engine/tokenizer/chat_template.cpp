// Chat templates rendered by hand; see chat_template.h for the recognised templates. Each
// Render* function follows its Jinja template statement by statement (quoted in comments).
#include "engine/tokenizer/chat_template.h"

#include <ctime>
#include <algorithm>
#include <fmt/format.h>

#include "engine/jinja/strings.h"
#include "engine/tokenizer/chat_writer.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {
namespace {

constexpr std::string_view kAlternate = "Conversation roles must alternate user/assistant/user/assistant/...";

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::string TitleRole(std::string_view role) {
  std::string out(role);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

// ChatML templates that inject a system prompt when the conversation has none carry it as a
// string literal: '<|im_start|>system\n<text><|im_end|>\n'. Returns <text> (unescaped) or "".
std::string FindDefaultSystemPrompt(std::string_view tmpl) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t pos = tmpl.find(kOpen); pos != std::string_view::npos; pos = tmpl.find(kOpen, pos + 1)) {
    size_t start = pos + kOpen.size();
    if (tmpl.substr(start, 2) == "\\n") {
      start += 2;
    } else if (tmpl.substr(start, 1) == "\n") {
      start += 1;
    } else {
      continue;
    }
    const size_t end = tmpl.find(kClose, start);
    if (end == std::string_view::npos) continue;
    const std::string_view body = tmpl.substr(start, end - start);
    if (body.empty() || body.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string text;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size()) {
        const char e = body[++i];
        text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        text += body[i];
      }
    }
    return text;
  }
  return "";
}

std::string TokenText(const Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "";
  return tok.vocab().tokens[static_cast<size_t>(id)];
}

std::string TodayDateString() {
  // strftime_now("%d %b %Y") as transformers evaluates it (local time, C locale month names).
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return std::string(buf, n);
}

// For templates that take a leading system message apart (llama2, gemma): the turns after it,
// which must alternate user/assistant from a user turn (a later system message passes at an
// odd index, as in their Jinja).
StatusOr<std::span<const ChatMessage>> TurnsAfterSystem(std::span<const ChatMessage> messages) {
  const auto turns = messages.subspan(messages[0].role == "system" ? 1 : 0);
  for (size_t i = 0; i < turns.size(); ++i) {
    if ((turns[i].role == "user") != (i % 2 == 0)) return InvalidArgumentError(std::string(kAlternate));
  }
  return turns;
}

}  // namespace

std::string_view StripPythonWhitespace(std::string_view s) {
  // jinja::SpaceAt: Python's str.isspace(), one code point at a time from either end.
  size_t begin = 0, len = 0;
  while (begin < s.size() && jinja::SpaceAt(s, begin, &len)) begin += len;
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // the last code point's first byte (at most 4 bytes back)
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!jinja::SpaceAt(s, start, &len) || start + len != end) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

ChatTemplate ChatTemplate::Make(Kind kind, std::string bos_token, std::string eos_token,
                                std::string default_system, std::string date_string,
                                std::optional<ToolFormat> tools) {
  ChatTemplate c(kind, std::move(bos_token), std::move(eos_token), std::move(default_system), std::move(date_string));
  if (tools) c.SetToolFormat(*tools);
  return c;
}

void ChatTemplate::SetToolFormat(ToolFormat format) {
  tool_format_ = format;
  switch (format) {
    case ToolFormat::kGeneric: tool_syntax_ = ToolSyntax::Generic(); break;
    case ToolFormat::kLlama31: tool_syntax_ = ToolSyntax::Llama31(); break;
    case ToolFormat::kHermes: tool_syntax_ = ToolSyntax::Hermes(); break;
    case ToolFormat::kMistral: tool_syntax_ = ToolSyntax::Mistral(); break;
  }
}

ChatTemplate ChatTemplate::Detect(std::string_view t, const Tokenizer& tok) {
  ChatTemplate c = DetectFamily(t, tok);
  if (t.empty()) return c;
  StatusOr<JinjaTemplate> parsed = ParseJinja(t);
  if (!parsed.ok()) {
    c.jinja_error_ = parsed.status().message();
    return c;
  }
  c.jinja_ = std::move(parsed).value();
  c.think_tags_ = Contains(t, "<think>") && Contains(t, "</think>");
  c.harmony_ = Contains(t, "<|channel|>") && Contains(t, "<|message|>");
  const Vocab& vocab = tok.vocab();
  c.control_texts_.resize(256);
  for (size_t id = 0; id < vocab.types.size() && id < vocab.tokens.size(); ++id) {
    const TokenType type = vocab.types[id];
    const std::string& text = vocab.tokens[id];
    if ((type == TokenType::kControl || type == TokenType::kUnknown) && !text.empty()) {
      c.control_texts_[static_cast<unsigned char>(text[0])].push_back(text);
    }
  }
  for (auto& bucket : c.control_texts_) {
    std::sort(bucket.begin(), bucket.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  }
  // Tools go to the template where it renders calls in a form kvserve reads back; otherwise
  // they are described in the prompt in the generic format (as llama.cpp does for templates
  // without tools).
  c.DeriveTools();
  const std::vector<ChatMessage> probe = {{"user", "x"}};
  StatusOr<RenderedChat> rendered = c.RenderJinja(probe, true, {});
  c.jinja_adds_bos_ = rendered.ok() && !c.bos_.empty() && rendered->text.rfind(c.bos_, 0) == 0;
  return c;
}

ChatTemplate ChatTemplate::DetectFamily(std::string_view t, const Tokenizer& tok) {
  const std::string bos = TokenText(tok, tok.bos_id());
  const std::string eos = TokenText(tok, tok.eos_id());
  if (Contains(t, "<|start_header_id|>")) {
    if (Contains(t, "Cutting Knowledge Date")) {
      ChatTemplate c(Kind::kLlama31, bos, eos, "", "");
      c.date_is_today_ = Contains(t, "strftime_now");
      return c;
    }
    return ChatTemplate(Kind::kLlama3, bos, eos, "", "");
  }
  if (Contains(t, "<|im_start|>")) {
    ChatTemplate c(Kind::kChatml, bos, eos, FindDefaultSystemPrompt(t), "");
    if (Contains(t, "<tool_call>")) c.SetToolFormat(ToolFormat::kHermes);
    return c;
  }
  if (Contains(t, "[INST]")) {
    if (Contains(t, "<<SYS>>")) return ChatTemplate(Kind::kLlama2, bos, eos, "", "");
    ChatTemplate c(Contains(t, "eos_token + ' '") ? Kind::kMistralV01 : Kind::kMistral, bos, eos, "", "");
    if (Contains(t, "[TOOL_CALLS]")) c.SetToolFormat(ToolFormat::kMistral);
    return c;
  }
  if (Contains(t, "<start_of_turn>")) return ChatTemplate(Kind::kGemma, bos, eos, "", "");
  if (Contains(t, "<|user|>") && Contains(t, "<|end|>")) return ChatTemplate(Kind::kPhi3, bos, eos, "", "");
  if (Contains(t, "<|user|>") && Contains(t, "<|assistant|>") && Contains(t, "eos_token") &&
      !Contains(t, "<|end|>")) {
    return ChatTemplate(Kind::kZephyr, bos, eos, "", "");
  }
  // Fallback: absent or unknown template.
  ChatTemplate fallback(tok.FindToken("<|im_start|>") >= 0 ? Kind::kChatml : Kind::kPlain, bos, eos, "", "");
  fallback.family_recognized_ = false;
  return fallback;
}

std::string_view ChatTemplate::name() const { return jinja_ ? "jinja" : family_name(); }

std::string_view ChatTemplate::family_name() const {
  switch (kind_) {
    case Kind::kPlain: return "plain";
    case Kind::kChatml: return "chatml";
    case Kind::kLlama2: return "llama2";
    case Kind::kMistral: return "mistral";
    case Kind::kMistralV01: return "mistral-v0.1";
    case Kind::kLlama3: return "llama3";
    case Kind::kLlama31: return "llama3.1";
    case Kind::kZephyr: return "zephyr";
    case Kind::kGemma: return "gemma";
    case Kind::kPhi3: return "phi3";
  }
  return "unknown";
}

bool ChatTemplate::adds_bos() const {
  if (jinja_) return jinja_adds_bos_;
  switch (kind_) {
    case Kind::kLlama2:
    case Kind::kMistral:
    case Kind::kMistralV01:
    case Kind::kLlama3:
    case Kind::kLlama31:
    case Kind::kGemma: return !bos_.empty();
    default: return false;
  }
}

std::vector<int32_t> ChatTemplate::Encode(const RenderedChat& rendered, const Tokenizer& tok) const {
  const bool has_bos = jinja_ ? !bos_.empty() && rendered.text.rfind(bos_, 0) == 0 : adds_bos();
  return tok.EncodeWithLiteralRanges(rendered.text, /*add_special=*/!has_bos, rendered.content);
}

StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                           std::span<const ChatTool> tools) const {
  ASSIGN_OR_RETURN(RenderedChat rendered, RenderChat(messages, add_generation_prompt, tools));
  return std::move(rendered.text);
}

StatusOr<RenderedChat> ChatTemplate::RenderChat(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                                std::span<const ChatTool> tools, const ChatExtras& extras) const {
  if (messages.empty()) return InvalidArgumentError("messages must not be empty");
  if (extras.continue_final_message) {
    if (add_generation_prompt) {
      return InvalidArgumentError("continue_final_message and add_generation_prompt cannot both be true");
    }
    if (messages.back().role != "assistant") {
      return InvalidArgumentError("continue_final_message needs an assistant message last");
    }
    ASSIGN_OR_RETURN(RenderedChat rendered, RenderChat(messages, false, tools, ChatExtras{extras.variables_json, false}));
    // As transformers: the text ends where the final message's content ends (stripped, as
    // templates often write it).
    const std::string_view content = StripPythonWhitespace(messages.back().content);
    const size_t at = content.empty() ? std::string::npos : rendered.text.rfind(content);
    if (at == std::string::npos) return InvalidArgumentError("continue_final_message: the template does not show the final message's content");
    const size_t end = at + content.size();
    rendered.text.resize(end);
    std::erase_if(rendered.content, [end](const TextRange& r) { return r.begin >= end; });
    for (TextRange& r : rendered.content) r.end = std::min(r.end, end);
    return rendered;
  }
  bool tool_messages = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return InvalidArgumentError(fmt::format(
          "messages[{}].role '{}' is not one of 'system', 'user', 'assistant', 'tool'", i, r));
    }
    if (!messages[i].tool_calls.empty() && r != "assistant") {
      return InvalidArgumentError(fmt::format("messages[{}]: only assistant messages have tool calls", i));
    }
    tool_messages = tool_messages || r == "tool" || !messages[i].tool_calls.empty();
  }
  const bool with_tools = !tools.empty() || tool_messages;
  if (jinja_ && (!with_tools || jinja_renders_tools_)) return RenderJinja(messages, add_generation_prompt, tools, extras);
  if (with_tools) return RenderWithTools(messages, add_generation_prompt, tools);
  return RenderMessages(messages, add_generation_prompt);
}

std::string ChatTemplate::Llama31Date() const {
  return !date_string_.empty() ? date_string_ : date_is_today_ ? TodayDateString() : std::string("26 Jul 2024");
}

StatusOr<RenderedChat> ChatTemplate::RenderMessages(std::span<const ChatMessage> messages,
                                                    bool add_generation_prompt) const {
  if (jinja_) return RenderJinja(messages, add_generation_prompt, {});
  ChatWriter out;
  switch (kind_) {
    case Kind::kLlama2: {
      // {% if messages[0]['role'] == 'system' %} loop_messages = messages[1:],
      // system_message = messages[0]['content'] {% else %} system_message = false
      const bool has_system = messages[0].role == "system";
      ASSIGN_OR_RETURN(const auto loop, TurnsAfterSystem(messages));
      for (size_t i = 0; i < loop.size(); ++i) {
        const ChatMessage& m = loop[i];
        ChatWriter content;
        if (i == 0 && has_system) content.Markup("<<SYS>>\n").Content(messages[0].content).Markup("\n<</SYS>>\n\n");
        content.Content(m.content);
        if (m.role == "user") {
          out.Markup(bos_).Markup("[INST] ").Stripped(content).Markup(" [/INST]");
        } else if (m.role == "assistant") {
          out.Markup(" ").Stripped(content).Markup(" ").Markup(eos_);
        }  // A later system message passes the alternation check at an odd index and is
           // not rendered (the template has no branch for it).
      }
      break;
    }
    case Kind::kMistral:
    case Kind::kMistralV01: {
      out.Markup(bos_);
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != (i % 2 == 0)) return InvalidArgumentError(std::string(kAlternate));
        if (m.role == "user") {
          out.Markup("[INST] ").Content(m.content).Markup(" [/INST]");
        } else if (m.role == "assistant") {
          out.Content(m.content).Markup(eos_);
          if (kind_ == Kind::kMistralV01) out.Markup(" ");
        } else {
          return InvalidArgumentError("Only user and assistant roles are supported!");
        }
      }
      break;
    }
    case Kind::kLlama3: {
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out.Markup(bos_);
        out.Markup("<|start_header_id|>").Markup(messages[i].role).Markup("<|end_header_id|>\n\n");
        out.Content(StripPythonWhitespace(messages[i].content)).Markup("<|eot_id|>");
      }
      if (add_generation_prompt) out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case Kind::kLlama31: {
      out.Markup(bos_);
      const bool has_system = messages[0].role == "system";
      const std::string_view system = has_system ? StripPythonWhitespace(messages[0].content) : "";
      const std::string date = Llama31Date();
      out.Markup("<|start_header_id|>system<|end_header_id|>\n\n");
      out.Markup("Cutting Knowledge Date: December 2023\n");
      out.Markup("Today Date: ").Markup(date).Markup("\n\n").Content(system).Markup("<|eot_id|>");
      for (const ChatMessage& m : messages.subspan(has_system ? 1 : 0)) {
        out.Markup("<|start_header_id|>").Markup(m.role).Markup("<|end_header_id|>\n\n");
        out.Content(StripPythonWhitespace(m.content)).Markup("<|eot_id|>");
      }
      if (add_generation_prompt) out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case Kind::kChatml: {
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && !default_system_.empty() && messages[0].role != "system") {
          out.Markup("<|im_start|>system\n").Markup(default_system_).Markup("<|im_end|>\n");
        }
        out.Markup("<|im_start|>").Markup(messages[i].role).Markup("\n");
        out.Content(messages[i].content).Markup("<|im_end|>\n");
      }
      if (add_generation_prompt) out.Markup("<|im_start|>assistant\n");
      break;
    }
    case Kind::kZephyr: {
      // Jinja with trim_blocks: the newline after each {{ ... }} line stays.
      for (size_t i = 0; i < messages.size(); ++i) {
        out.Markup("<|").Markup(messages[i].role).Markup("|>\n").Content(messages[i].content).Markup(eos_).Markup("\n");
        if (i + 1 == messages.size() && add_generation_prompt) out.Markup("<|assistant|>\n");
      }
      break;
    }
    case Kind::kGemma: {
      // Gemma's template refuses a system message; like llama.cpp, it is put in front of the
      // first user turn instead. Roles must then alternate from a user turn; the assistant's
      // turns are "model"; every content is trimmed.
      out.Markup(bos_);
      const bool has_system = messages[0].role == "system";
      ASSIGN_OR_RETURN(const auto loop, TurnsAfterSystem(messages));
      for (size_t i = 0; i < loop.size(); ++i) {
        const ChatMessage& m = loop[i];
        ChatWriter content;
        if (i == 0 && has_system) content.Content(messages[0].content).Markup("\n\n");
        content.Content(m.content);
        out.Markup("<start_of_turn>").Markup(m.role == "assistant" ? "model" : m.role).Markup("\n");
        out.Stripped(content).Markup("<end_of_turn>\n");
      }
      if (add_generation_prompt) out.Markup("<start_of_turn>model\n");
      break;
    }
    case Kind::kPhi3: {
      for (const ChatMessage& m : messages) {
        out.Markup("<|").Markup(m.role).Markup("|>\n").Content(m.content).Markup("<|end|>\n");
      }
      if (add_generation_prompt) {
        out.Markup("<|assistant|>\n");
      } else {
        out.Markup(eos_);
      }
      break;
    }
    case Kind::kPlain: {
      for (const ChatMessage& m : messages) {
        // "Role:" and one space, unless the content brings its own (a generated reply does).
        out.Markup(TitleRole(m.role)).Markup(":");
        if (size_t len = 0; m.content.empty() || !jinja::SpaceAt(m.content, 0, &len)) out.Markup(" ");
        out.Content(m.content).Markup("\n");
      }
      if (add_generation_prompt) out.Markup("Assistant:");
      break;
    }
  }
  if (out.empty()) return InvalidArgumentError("the messages render to an empty prompt");
  return out.Take();
}

}  // namespace kvserve
