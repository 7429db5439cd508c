// Tool calls (function calling) for the chat API, whatever the front end:
//
//   ToolRequest       the tools a request offers and its tool_choice, as the front end decoded
//                     them (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`)
//   ToolCallSpec      the constraint that makes the model's calls parse and validate, in the
//                     family's format (chat_template.h, "Tools"):
//                       llama3.1  {"name": <one of the tools>, "parameters": <its schema>}
//                       hermes    <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>,
//                                 repeated with parallel calls
//                       mistral   [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]
//                       generic   {"tool_call": {"name", "arguments"}} ({"tool_calls": [...]}
//                                 with parallel calls), or {"response": "<text>"} under auto
//                     `required` and a named function constrain from the first token; `auto`
//                     constrains from the moment the family's opener ("<tool_call>",
//                     "[TOOL_CALLS]", '{"name"') appears (the generic format: always, with
//                     "response" as one of its alternatives); `none` shows the tools (as vLLM
//                     does: the turns of a tool loop then share their prefix) but neither
//                     constrains nor parses.
//   ToolCallParser    turns the generated text back into content and calls, incrementally:
//                     a call's id and name come once, its arguments in fragments that
//                     concatenate to the JSON text the model wrote.
// A tool's parameters are enforced exactly under `"strict": true` (an unsupported keyword is a
// 400); otherwise keywords the grammar cannot enforce are ignored, so any schema a client
// sends works and the arguments are always JSON.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/grammar/output_spec.h"
#include "engine/tokenizer/chat_template.h"
#include "server/api/json_nesting.h"

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

// The constraint for `request` (REQUIRES: active()) in `format`.
[[nodiscard]] StructuredOutputSpec ToolCallSpec(ToolFormat format, const ToolRequest& request);

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

  explicit ToolCallParser(ToolFormat format);

  [[nodiscard]] Delta Feed(std::string_view text);
  // The end of the text: what was held back. A call left incomplete (the text ended inside it,
  // e.g. at max_tokens) is not a call: its text is content.
  [[nodiscard]] Delta Finish();

  // The complete calls and all content so far (for a complete response).
  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& content() const { return content_; }

 private:
  enum class State { kText, kHead, kArguments, kTail, kFailed };
  // Advances over buf_ as far as it can; appends to `out`.
  void Run(Delta* out);
  bool RunHead(Delta* out);
  bool RunArguments(Delta* out);
  bool RunTail();
  // Where the family's opener starts in buf_ (npos if nowhere); *held: where a possible
  // opener's start begins (buf_.size() if none).
  size_t FindOpener(size_t* held) const;
  void EmitContent(std::string_view text, Delta* out);
  // The text from the current call's start becomes content (a call that does not parse).
  void Fail(Delta* out);
  std::string NewId();

  ToolFormat format_;
  std::string buf_;        // text not consumed yet
  State state_ = State::kText;
  std::string call_text_;  // the raw text of the calls being parsed (for Fail)
  ToolCall current_;
  // The nesting of the JSON text read: the arguments', then the call object's after them.
  JsonNesting nesting_;
  bool in_list_ = false;   // mistral: inside [TOOL_CALLS] [...]
  std::vector<ToolCall> calls_;
  std::string content_;
  std::mt19937_64 rng_;
};

}  // namespace kvserve
