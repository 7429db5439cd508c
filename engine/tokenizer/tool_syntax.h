// ToolSyntax: how a chat template writes an assistant turn's tool calls, so that the calls a
// model generates can be parsed back and constrained (server/api/tool_calls.h).
//
// Most templates write calls as literal text around each call's name and arguments:
//
//   begin  call_begin NAME name_end ARGS call_end  (separator  call_begin NAME ...)*  end
//
//   hermes (Qwen 2.5/3, Hermes, Granite 4):  call_begin "<tool_call>\n{\"name\": \""
//                                            name_end "\", \"arguments\": "  call_end "}\n</tool_call>"
//   DeepSeek V3.1:  begin "<｜tool▁calls▁begin｜>", call_begin "<｜tool▁call▁begin｜>",
//                   name_end "<｜tool▁sep｜>", call_end "<｜tool▁call▁end｜>", end "<｜tool▁calls▁end｜>"
//
// ARGS is the arguments' JSON object, or, for templates that write each argument as markup
// (Qwen3-Coder, GLM, MiniMax, Seed-OSS), `param_begin KEY param_mid VALUE param_end` per
// argument (a string's VALUE raw, another value as JSON). In the literals, kIdSlot stands for
// the call's id (Mistral: 9 letters and digits) and kIndexSlot for its index (Kimi K2, Command
// R7B: 0, 1, ...).
//
// DeriveToolSyntax finds the literals by rendering the template: a conversation whose last
// assistant turn holds one probe call, then two, then only text, compared with the generation
// prompt. A template it cannot read that way has no syntax of its own, and its tools are
// described in the generic JSON form instead (kGeneric: {"tool_call": ...} or {"response": ...},
// the whole reply).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvserve {

struct ChatMessage;
struct ChatTool;

struct ToolSyntax {
  static constexpr char kIdSlot = '\x01';
  static constexpr char kIndexSlot = '\x02';
  static constexpr int kIdLength = 9;

  enum class Kind { kGeneric, kLiteral };
  Kind kind = Kind::kGeneric;
  std::string family;    // "generic", "hermes", "llama3.1", "mistral", or what it was derived from
  bool derived = false;  // read from the template (DeriveToolSyntax), not named
  std::string begin, call_begin, name_end, call_end, separator, end;
  // The template writes the arguments as markup, one element per argument.
  bool xml_arguments = false;
  std::string param_begin, param_mid, param_end;
  // Where it differs: the markup between the key and a value that is not a string (DeepSeek
  // V3.2's `string="false"`); such a value is JSON.
  std::string param_mid_json;
  // The template writes the arguments' JSON over several lines (indented: Command R+).
  bool multiline_arguments = false;
  // The template renders more than one call in a turn.
  bool parallel = true;

  // The named syntaxes of the hand-written families.
  static ToolSyntax Generic();
  static ToolSyntax Hermes();
  static ToolSyntax Llama31();
  static ToolSyntax Mistral();

  bool has_id() const;
  // The text every call list starts with, up to its first slot (never empty for kLiteral).
  std::string opener() const;
  // One line for logs: "hermes (derived): <tool_call>\n{"name": "NAME", ..." with escapes.
  std::string Describe() const;
};

// Renders a conversation (the probe tools offered) with the template; the text or its error.
using ToolProbeRender =
    std::function<StatusOr<std::string>(std::span<const ChatMessage> messages, bool add_generation_prompt)>;
// The tools the probe conversations offer (two functions of two string arguments).
std::vector<ChatTool> ToolProbeTools();

// The template's syntax, or nullopt when it does not render the probe calls in a form of the
// kind above. `eos`: the end-of-sequence token's text; `control_texts`: the vocabulary's
// control-token texts (a literal never ends inside one, and the calls' text does not end with
// one). *refused: the template raised an error on the probe call (it may want the arguments
// as JSON text: Functionary).
std::optional<ToolSyntax> DeriveToolSyntax(const ToolProbeRender& render, std::string_view eos,
                                           std::span<const std::string> control_texts, bool* refused = nullptr);

}  // namespace kvserve
