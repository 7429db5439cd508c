// Tool calls (function calling) for the chat API, whatever the front end:
//
//   ToolRequest       the tools a request offers and its tool_choice, as the front end decoded
//                     them (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`)
//   ToolCallSpec      the constraint that makes the model's calls parse and validate, in the
//                     syntax of the model's template (ToolSyntax, engine/tokenizer/tool_syntax.h):
//                     its literals around each call's name and arguments, the arguments under
//                     the function's JSON Schema (or, where the template writes them as
//                     markup, one element per argument of the function); the generic syntax:
//                     {"tool_call": {"name", "arguments"}} ({"tool_calls": [...]} with
//                     parallel calls), or {"response": "<text>"} under auto.
//                     `required` and a named function constrain from the first token; `auto`
//                     constrains from the moment the syntax's opener ("<tool_call>",
//                     "[TOOL_CALLS]", '{"name":') appears (the generic syntax: always, with
//                     "response" as one of its alternatives); `none` shows the tools (as vLLM
//                     does: the turns of a tool loop then share their prefix) but neither
//                     constrains nor parses.
//   ToolCallParser    turns the generated text back into content and calls, incrementally:
//                     a call's id and name come once, its arguments in fragments that
//                     concatenate to the JSON text of its arguments. Whitespace in the
//                     syntax's literals matches any whitespace, and JSON punctuation may have
//                     whitespace around it, so a call written by hand parses too.
// A tool's parameters are enforced exactly under `"strict": true` (an unsupported keyword is a
// 400); otherwise keywords the grammar cannot enforce are ignored, so any schema a client
// sends works and the arguments are always JSON. Arguments written as markup are constrained
// to the function's parameter names, not their types.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_nesting.h"
#include "common/status.h"
#include "engine/grammar/output_spec.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tool_syntax.h"

namespace kvserve {

struct ToolDefinition {
  ChatTool chat;           // name and the tool object's JSON, for the prompt
  std::string parameters;  // the function's JSON Schema text ("" = any object)
  bool strict = false;
};

struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kFunction };
  std::vector<ToolDefinition> tools;
  Choice choice = Choice::kAuto;  // OpenAI's default with tools
  std::string function;           // kFunction: the function's name
  bool parallel = true;           // parallel_tool_calls

  // The model may call a tool (the output is constrained and parsed).
  bool active() const { return !tools.empty() && choice != Choice::kNone; }
};

// The constraint for `request` (REQUIRES: active()) in `syntax`.
[[nodiscard]] StructuredOutputSpec ToolCallSpec(const ToolSyntax& syntax, const ToolRequest& request);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

class ToolCallParser {
 public:
  // What one piece of text added: content, and call fragments (`index` counts calls from 0;
  // id and name are set in a call's first fragment only).
  struct CallFragment {
    int index = 0;
    std::string id;
    std::string name;
    std::string arguments;
  };
  struct Delta {
    std::string content;
    std::vector<CallFragment> calls;
    bool empty() const { return content.empty() && calls.empty(); }
  };

  // `tools`: the offered tools (their parameters' types turn arguments written as markup into
  // JSON: a string parameter's value stays a string).
  explicit ToolCallParser(ToolSyntax syntax, std::span<const ToolDefinition> tools = {});

  [[nodiscard]] Delta Feed(std::string_view text);
  // The end of the text: what was held back. A call left incomplete (the text ended inside it,
  // e.g. at max_tokens) is not a call: its text is content.
  [[nodiscard]] Delta Finish();

  // The complete calls and all content so far (for a complete response).
  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& content() const { return content_; }

  // How a literal of the syntax matched text: completely, not (yet: the text ended), or not.
  enum class Match { kYes, kPartial, kNo };

 private:
  enum class State { kText, kName, kArguments, kParameters, kCallEnd, kAfterCall, kFailed };
  // Advances over buf_ as far as it can; appends to `out`. Each Run* returns false to wait.
  void Run(Delta* out);
  bool RunText(Delta* out);
  bool RunName(Delta* out);
  bool RunArguments(Delta* out);
  bool RunParameters(Delta* out);
  bool RunCallEnd(Delta* out);
  bool RunAfterCall(Delta* out);
  // Matches `literal` at buf_[*pos] (the id slot's text to *id).
  Match MatchAt(std::string_view literal, size_t* pos, std::string* id) const;
  void Consume(size_t n);  // buf_'s first n bytes are the call's text
  void EmitContent(std::string_view text, Delta* out);
  void AddArguments(std::string_view fragment, Delta* out);
  void EndCall();
  // The text from the current call's start becomes content (a call that does not parse).
  void Fail(Delta* out);
  std::string NewId();
  // A parameter's value written as markup, as JSON: a string unless its type is not one (or
  // the markup said it is JSON).
  std::string ParameterJson(const std::string& key, std::string value, bool json_value) const;

  ToolSyntax syntax_;
  std::string call_end_without_id_;  // call_end without its `, "id": ...` member, if it has one
  std::vector<std::pair<std::string, std::vector<std::string>>> string_parameters_;  // function -> keys
  std::string buf_;        // text not consumed yet
  State state_ = State::kText;
  std::string call_text_;  // the raw text of the call being parsed (for Fail)
  ToolCall current_;
  std::string id_;         // an id read before the call's arguments
  int parameters_ = 0;     // markup arguments of the current call read
  JsonNesting nesting_;
  std::vector<ToolCall> calls_;
  std::string content_;
  std::mt19937_64 rng_;
};

}  // namespace kvserve
