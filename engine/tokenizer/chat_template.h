// ChatTemplate: turns chat messages into the prompt text a chat model was trained on.
//
// The model's template: a template text (GGUF `tokenizer.chat_template`) renders with kvserve's
// Jinja engine (engine/jinja) as transformers' apply_chat_template renders it, given messages
// (tool-call arguments as the object they encode), tools, add_generation_prompt, bos_token and
// eos_token; a template that raises refuses the request (INVALID_ARGUMENT, its own message).
// Tools go to the template when it renders tool calls in a form kvserve can read back
// (tool_syntax(), derived by rendering probe calls: tool_syntax.h); otherwise they are
// described in the generic format inside the messages, which the template then renders. A
// template text that does not parse is reported (jinja_error()) and the hand-written family it
// looks like renders instead.
//
// Hand-written families: for a model without a template (and the fallback above) the common
// templates are recognised by their text and rendered by hand, byte for byte as their Jinja
// renders them (including its raise_exception checks, which become INVALID_ARGUMENT):
//
//   name       recognised by                            models
//   llama2     "[INST]" and "<<SYS>>"                    Llama-2-chat, CodeLlama-instruct
//   mistral    "[INST]" without "<<SYS>>"                Mistral-7B-Instruct-v0.2, Mixtral
//   mistral-v0.1  ... with "eos_token + ' '"             Mistral-7B-Instruct-v0.1
//   llama3     "<|start_header_id|>"                     Llama-3-Instruct
//   llama3.1   ... and "Cutting Knowledge Date"          Llama-3.1/3.2-Instruct (no tools;
//                                                        "Today Date: 26 Jul 2024", or
//                                                        today's date when the template
//                                                        calls strftime_now, as 3.2 does)
//   chatml     "<|im_start|>"                            OpenHermes, Qwen (a default system
//                                                        prompt in the template is honoured)
//   zephyr     "<|user|>" + "<|assistant|>" + eos_token  Zephyr, TinyLlama-chat
//
// Fallback when the template is absent or not recognised:
//   * "chatml" when the vocabulary has an <|im_start|> token;
//   * otherwise "plain": one "<Role>: <content>\n" line per message ("System", "User",
//     "Assistant") and "Assistant:" as the generation prompt.
//
// BOS: llama2, mistral and llama3* write the BOS token into the text (`bos_token` in Jinja);
// for them adds_bos() is true and the caller must not add another: Encode() below tokenizes
// with add_special = !adds_bos().
//
// Control tokens: only the template's own markup ("<|im_start|>", "<s>", "[INST]" ...)
// becomes control tokens. Message content is text: RenderChat records where each message's
// content lies and Encode tokenizes "</s>" or "<|im_start|>system" typed by a user as the
// characters they are, so content can neither end the prompt nor forge a turn.
//
// Assistant turns: the plain template renders "Assistant:" + content with one space between
// unless the content already starts with whitespace, so the reply the model generated after
// "Assistant:" (" Hello", as detokenized) renders back to the same tokens and a chat session
// reuses it from the cache on the next turn.
//
// Roles: "system", "user", "assistant", "tool"; anything else is INVALID_ARGUMENT, and so is
// an empty message list.
//
// Tools of the hand-written families (chat_tools.cpp: models without a template that renders
// them): with tools, an assistant turn's tool calls or tool results in the conversation, the
// family's native format (tool_format()):
//   llama3.1   tools in the first user message ("Given the following functions..."), a call
//              as {"name": ..., "parameters": ...}, results in "ipython" turns
//   hermes     ChatML with "<tool_call>" in its template (Qwen 2.5/3, Hermes): <tools> in the
//              system turn, calls in <tool_call> blocks, results in <tool_response> blocks
//   mistral    "[TOOL_CALLS]" in its template (Mistral v0.3+): [AVAILABLE_TOOLS] before the last
//              user turn, [TOOL_CALLS] [...] and [TOOL_RESULTS] blocks
//   generic    any other template: the tools and a JSON answer format in the system prompt (or
//              the first user turn where the template has no system role), calls as
//              {"tool_call": ...} / {"tool_calls": [...]} content, results as user turns
// Tool names, arguments, ids and results are content (text), never markup. Content is text; whitespace stripping follows Python's str.strip()
// where the template uses .strip() or |trim.
//
// Immutable after Detect; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tool_syntax.h"

namespace kvserve {

namespace jinja {
class Template;
}

// A tool call of an assistant turn, as the client sends it back: `arguments` is JSON text.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_, std::vector<ChatToolCall> tool_calls_ = {},
              std::string tool_call_id_ = "", std::string name_ = "")
      : role(std::move(role_)), content(std::move(content_)), tool_calls(std::move(tool_calls_)),
        tool_call_id(std::move(tool_call_id_)), name(std::move(name_)) {}

  std::string role;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool: the call this result answers
  std::string name;                      // tool: the function's name, when the client gave it
  std::string reasoning_content;         // assistant: its thinking, given to templates that show it
};

// What a chat request adds to its messages (the model's template sees it; hand-written
// families ignore the variables).
struct ChatExtras {
  // chat_template_kwargs: a JSON object whose members become template variables
  // (enable_thinking, reasoning_effort, ...); "" for none.
  std::string variables_json;
  // The last message is an assistant turn the model continues: the text ends where its
  // content does (transformers' continue_final_message).
  bool continue_final_message = false;
};

// A tool the model may call: the client's tool object ({"type": "function", "function":
// {...}}) as JSON text, compact with ", " and ": " separators as Jinja's tojson writes it, and
// indented by 4 (Llama 3.1's tojson(indent=4)). The front end serializes it.
struct ChatTool {
  std::string name;
  std::string json;
  std::string json_indented;
};

enum class ToolFormat { kGeneric, kLlama31, kHermes, kMistral };

// A rendered prompt and the byte ranges of message content in it (sorted, disjoint).
struct RenderedChat {
  std::string text;
  std::vector<TextRange> content;
};

class ChatTemplate {
 public:
  enum class Kind { kPlain, kChatml, kLlama2, kMistral, kMistralV01, kLlama3, kLlama31, kZephyr, kGemma, kPhi3 };

  // Recognises `template_text` (may be empty); takes the BOS/EOS token texts from `tok`.
  [[nodiscard]] static ChatTemplate Detect(std::string_view template_text, const Tokenizer& tok);
  // The hand-written family `template_text` looks like (Detect without the Jinja engine).
  [[nodiscard]] static ChatTemplate DetectFamily(std::string_view template_text, const Tokenizer& tok);
  // For tests and callers that know the kind: explicit token texts. `default_system` is
  // ChatML's built-in system prompt; `date_string` the llama3.1 "Today Date" (empty: the
  // template's fixed "26 Jul 2024").
  // `tools`: the tool format (default: llama3.1 for kLlama31, generic for the others).
  [[nodiscard]] static ChatTemplate Make(Kind kind, std::string bos_token, std::string eos_token,
                                         std::string default_system = "", std::string date_string = "",
                                         std::optional<ToolFormat> tools = std::nullopt);

  // The prompt text with its content ranges. `add_generation_prompt` appends the assistant
  // turn header where the template has one (llama2 and mistral ignore it, as their Jinja
  // templates do). `tools`: the tools the model may call (see Tools above).
  [[nodiscard]] StatusOr<RenderedChat> RenderChat(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                                  std::span<const ChatTool> tools = {},
                                                  const ChatExtras& extras = {}) const;
  // RenderChat's text only.
  [[nodiscard]] StatusOr<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                             std::span<const ChatTool> tools = {}) const;
  // Tokenizes a rendered prompt as the template requires (see BOS and control tokens above).
  [[nodiscard]] std::vector<int32_t> Encode(const RenderedChat& rendered, const Tokenizer& tok) const;

  // "jinja" when the model's own template renders, else the hand-written family:
  // "plain", "chatml", "llama2", "mistral", "mistral-v0.1", "llama3", "llama3.1", "zephyr".
  std::string_view name() const;
  // The family the template text looks like (its tool-call format follows it); name() of the
  // hand-written renderer. family_recognized(): the text is one of the families (not the
  // fallback for an absent or unknown template).
  std::string_view family_name() const;
  bool family_recognized() const { return family_recognized_; }
  // Whether the model's own template renders (see "The model's template" above).
  bool is_jinja() const { return jinja_ != nullptr; }
  // Whether the model's template writes <think>...</think> (its replies may carry reasoning).
  bool writes_think_tags() const { return think_tags_; }
  // Whether it writes harmony's channels (gpt-oss: <|channel|>analysis<|message|>...).
  bool writes_harmony() const { return harmony_; }
  // Why a template text given to Detect is not rendered as Jinja ("" when it is, or none was given).
  const std::string& jinja_error() const { return jinja_error_; }
  Kind kind() const { return kind_; }
  // The hand-written family's tool format (for a model without a template that renders tools).
  ToolFormat tool_format() const { return tool_format_; }
  // How the model writes tool calls: derived from its template when the template renders them
  // (tools then go to it), else the hand-written family's (tool_syntax.h).
  const ToolSyntax& tool_syntax() const { return tool_syntax_; }
  // True when the rendered text starts with the BOS token's text.
  bool adds_bos() const;
  // ChatML's built-in system prompt used when the first message is not a system message
  // (e.g. Qwen2's "You are a helpful assistant."); empty when the template has none.
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate(Kind kind, std::string bos, std::string eos, std::string default_system,
               std::string date_string)
      : kind_(kind), bos_(std::move(bos)), eos_(std::move(eos)),
        default_system_(std::move(default_system)), date_string_(std::move(date_string)),
        tool_format_(kind == Kind::kLlama31 ? ToolFormat::kLlama31 : ToolFormat::kGeneric),
        tool_syntax_(kind == Kind::kLlama31 ? ToolSyntax::Llama31() : ToolSyntax::Generic()) {}
  void SetToolFormat(ToolFormat format);
  // chat_jinja.cpp: tool_syntax_ from the model's template (DeriveToolSyntax), or the generic
  // format where the template does not render calls in a form kvserve reads back.
  void DeriveTools();

  using JinjaTemplate = std::shared_ptr<const jinja::Template>;
  [[nodiscard]] static StatusOr<JinjaTemplate> ParseJinja(std::string_view text);
  // chat_jinja.cpp: the model's template, given the tools.
  StatusOr<RenderedChat> RenderJinja(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                     std::span<const ChatTool> tools, const ChatExtras& extras = {}) const;
  // The messages in the template's own format (no tools, no tool messages).
  StatusOr<RenderedChat> RenderMessages(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // chat_tools.cpp: with tools or tool messages.
  StatusOr<RenderedChat> RenderWithTools(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                         std::span<const ChatTool> tools) const;
  StatusOr<RenderedChat> RenderLlama31Tools(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                            std::span<const ChatTool> tools) const;
  StatusOr<RenderedChat> RenderHermesTools(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                           std::span<const ChatTool> tools) const;
  StatusOr<RenderedChat> RenderMistralTools(std::span<const ChatMessage> messages, std::span<const ChatTool> tools) const;
  std::string Llama31Date() const;

  Kind kind_;
  std::string bos_;
  std::string eos_;
  std::string default_system_;
  std::string date_string_;    // llama3.1 "Today Date"; empty: see date_is_today_
  bool date_is_today_ = false;  // llama3.2: strftime_now("%d %b %Y") at render time
  ToolFormat tool_format_;
  ToolSyntax tool_syntax_;
  JinjaTemplate jinja_;          // the model's template, when it parses
  bool jinja_renders_tools_ = false;  // the template renders tools and calls (tool_syntax_)
  bool arguments_as_text_ = false;    // it takes a call's arguments as JSON text, not an object
  bool jinja_adds_bos_ = false;       // its text starts with the BOS token's
  bool think_tags_ = false;
  bool harmony_ = false;
  bool family_recognized_ = true;
  // Texts of the vocabulary's control tokens by their first byte, longest first: never control
  // tokens when a client's string carries them (chat_jinja.cpp). Empty without a Jinja template.
  std::vector<std::vector<std::string>> control_texts_;
  std::string jinja_error_;
};

// Python's str.strip(): removes leading and trailing Unicode whitespace.
std::string_view StripPythonWhitespace(std::string_view s);

}  // namespace kvserve
