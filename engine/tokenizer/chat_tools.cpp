// Chat templates with tools: each family's native format (chat_template.h, "Tools"). The
// llama3.1, hermes and mistral renderings follow their Jinja templates statement by statement
// (Llama-3.1-Instruct, Qwen2.5-Instruct, Mistral-7B-Instruct-v0.3); the generic one is
// llama.cpp's: plain messages that any template renders.

#include <string>
#include <vector>

#include "engine/jinja/value.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/chat_writer.h"

namespace kvserve {
namespace {

// A JSON string literal as Python's json.dumps writes it (the generic format writes tool results
// and ids as JSON).
std::string JsonQuote(std::string_view s) { return jinja::ToJson(jinja::Value(s)); }

// {"name": "...", "arguments": ...}: one call as the generic format writes it.
std::string GenericCall(const ChatToolCall& c) {
  std::string out = "{\"name\": " + JsonQuote(c.name) + ", \"arguments\": " + (c.arguments.empty() ? "{}" : c.arguments);
  if (!c.id.empty()) out += ", \"id\": " + JsonQuote(c.id);
  return out + "}";
}

constexpr std::string_view kGenericInstructions =
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the "
    "user's request";

}  // namespace

StatusOr<RenderedChat> ChatTemplate::RenderWithTools(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                                     std::span<const ChatTool> tools) const {
  switch (tool_format_) {
    case ToolFormat::kLlama31: return RenderLlama31Tools(messages, add_generation_prompt, tools);
    case ToolFormat::kHermes: return RenderHermesTools(messages, add_generation_prompt, tools);
    case ToolFormat::kMistral: return RenderMistralTools(messages, tools);
    case ToolFormat::kGeneric: break;
  }
  // Generic: plain messages. The tools and the answer format go in the system prompt (in front
  // of the first user turn for templates without a system role); calls become the assistant's
  // JSON; consecutive results become one user turn.
  std::vector<ChatMessage> plain;
  std::string instructions;
  if (!tools.empty()) {
    instructions = "You can call any of the following tools to satisfy the user's requests: [";
    for (size_t i = 0; i < tools.size(); ++i) instructions += (i ? ", " : "") + tools[i].json;
    instructions += "]\n\n" + std::string(kGenericInstructions);
  }
  const bool system_role = kind_ != Kind::kMistral && kind_ != Kind::kMistralV01;
  bool after_result = false;  // consecutive results join one user turn
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      const std::string result = "{\"tool_response\": {\"tool\": " + JsonQuote(m.name) + ", \"tool_call_id\": " +
                                 JsonQuote(m.tool_call_id) + ", \"content\": " + JsonQuote(m.content) + "}}";
      if (after_result) {
        plain.back().content += "\n" + result;
      } else {
        plain.push_back({"user", result, {}, "", ""});
      }
      after_result = true;
      continue;
    }
    after_result = false;
    if (!m.tool_calls.empty()) {
      std::string content;
      if (m.tool_calls.size() == 1) {
        content = "{\"tool_call\": " + GenericCall(m.tool_calls[0]) + "}";
      } else {
        content = "{\"tool_calls\": [";
        for (size_t i = 0; i < m.tool_calls.size(); ++i) content += (i ? ", " : "") + GenericCall(m.tool_calls[i]);
        content += "]}";
      }
      plain.push_back({"assistant", content, {}, "", ""});
    } else {
      plain.push_back({m.role, m.content, {}, "", ""});
    }
  }
  if (!instructions.empty()) {
    if (system_role && plain[0].role == "system") {
      plain[0].content += "\n\n" + instructions;
    } else if (system_role) {
      plain.insert(plain.begin(), ChatMessage{"system", instructions, {}, "", ""});
    } else if (plain[0].role == "user") {
      plain[0].content = instructions + "\n\n" + plain[0].content;
    }
  }
  return RenderMessages(plain, add_generation_prompt);
}

StatusOr<RenderedChat> ChatTemplate::RenderLlama31Tools(std::span<const ChatMessage> messages,
                                                        bool add_generation_prompt,
                                                        std::span<const ChatTool> tools) const {
  ChatWriter out;
  out.Markup(bos_);
  const bool has_system = messages[0].role == "system";
  out.Markup("<|start_header_id|>system<|end_header_id|>\n\n");
  // {%- if builtin_tools is defined or tools is not none %}
  if (!tools.empty()) out.Markup("Environment: ipython\n");
  out.Markup("Cutting Knowledge Date: December 2023\n");
  out.Markup("Today Date: ").Markup(Llama31Date()).Markup("\n\n");
  if (has_system) out.Content(StripPythonWhitespace(messages[0].content));
  out.Markup("<|eot_id|>");
  std::span<const ChatMessage> rest = messages.subspan(has_system ? 1 : 0);
  if (!tools.empty()) {
    // Custom tools are passed in the first user message (tools_in_user_message).
    if (rest.empty()) {
      return InvalidArgumentError("Cannot put tools in the first user message when there's no first user message!");
    }
    out.Markup("<|start_header_id|>user<|end_header_id|>\n\n");
    out.Markup("Given the following functions, please respond with a JSON for a function call ");
    out.Markup("with its proper arguments that best answers the given prompt.\n\n");
    out.Markup("Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
               "value}.");
    out.Markup("Do not use variables.\n\n");
    for (const ChatTool& t : tools) out.Content(t.json_indented).Markup("\n\n");
    out.Content(StripPythonWhitespace(rest[0].content)).Markup("<|eot_id|>");
    rest = rest.subspan(1);
  }
  for (const ChatMessage& m : rest) {
    if (m.role == "tool") {
      // A string is iterable in Jinja: `message.content | tojson` quotes it.
      out.Markup("<|start_header_id|>ipython<|end_header_id|>\n\n").Content(JsonQuote(m.content)).Markup("<|eot_id|>");
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) return InvalidArgumentError("This model only supports single tool-calls at once!");
      const ChatToolCall& c = m.tool_calls[0];
      out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      out.Markup("{\"name\": \"").Content(c.name).Markup("\", \"parameters\": ");
      out.Content(c.arguments.empty() ? "{}" : c.arguments).Markup("}<|eot_id|>");
    } else {
      out.Markup("<|start_header_id|>").Markup(m.role).Markup("<|end_header_id|>\n\n");
      out.Content(StripPythonWhitespace(m.content)).Markup("<|eot_id|>");
    }
  }
  if (add_generation_prompt) out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out.Take();
}

StatusOr<RenderedChat> ChatTemplate::RenderHermesTools(std::span<const ChatMessage> messages,
                                                       bool add_generation_prompt,
                                                       std::span<const ChatTool> tools) const {
  ChatWriter out;
  const bool has_system = messages[0].role == "system";
  if (!tools.empty()) {
    out.Markup("<|im_start|>system\n");
    if (has_system) {
      out.Content(messages[0].content).Markup("\n\n");
    } else if (!default_system_.empty()) {
      out.Markup(default_system_).Markup("\n\n");
    }
    out.Markup("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n");
    out.Markup("You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const ChatTool& t : tools) out.Markup("\n").Content(t.json);
    out.Markup("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call><|im_end|>\n");
  } else if (has_system) {
    out.Markup("<|im_start|>system\n").Content(messages[0].content).Markup("<|im_end|>\n");
  } else if (!default_system_.empty()) {
    out.Markup("<|im_start|>system\n").Markup(default_system_).Markup("<|im_end|>\n");
  }
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out.Markup("<|im_start|>user");
      out.Markup("\n<tool_response>\n").Content(m.content).Markup("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out.Markup("<|im_end|>\n");
    } else if (!m.tool_calls.empty()) {
      out.Markup("<|im_start|>assistant");
      if (!m.content.empty()) out.Markup("\n").Content(m.content);
      for (const ChatToolCall& c : m.tool_calls) {
        out.Markup("\n<tool_call>\n{\"name\": \"").Content(c.name).Markup("\", \"arguments\": ");
        out.Content(c.arguments.empty() ? "{}" : c.arguments).Markup("}\n</tool_call>");
      }
      out.Markup("<|im_end|>\n");
    } else {
      out.Markup("<|im_start|>").Markup(m.role).Markup("\n").Content(m.content).Markup("<|im_end|>\n");
    }
  }
  if (add_generation_prompt) out.Markup("<|im_start|>assistant\n");
  return out.Take();
}

StatusOr<RenderedChat> ChatTemplate::RenderMistralTools(std::span<const ChatMessage> messages,
                                                        std::span<const ChatTool> tools) const {
  const bool has_system = messages[0].role == "system";
  const std::span<const ChatMessage> loop = messages.subspan(has_system ? 1 : 0);
  size_t last_user = loop.size();
  for (size_t i = 0; i < loop.size(); ++i) {
    if (loop[i].role == "user") last_user = i;
  }
  ChatWriter out;
  out.Markup(bos_);
  for (size_t i = 0; i < loop.size(); ++i) {
    const ChatMessage& m = loop[i];
    if (m.role == "user") {
      if (!tools.empty() && i == last_user) {
        out.Markup("[AVAILABLE_TOOLS] [");
        for (size_t t = 0; t < tools.size(); ++t) out.Markup(t ? ", " : "").Content(tools[t].json);
        out.Markup("][/AVAILABLE_TOOLS]");
      }
      out.Markup("[INST] ");
      if (i + 1 == loop.size() && has_system) out.Content(messages[0].content).Markup("\n\n");
      out.Content(m.content).Markup("[/INST]");
    } else if (!m.tool_calls.empty()) {
      out.Markup("[TOOL_CALLS] [");
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ChatToolCall& c = m.tool_calls[k];
        out.Markup(k ? ", " : "").Markup("{\"name\": \"").Content(c.name).Markup("\", \"arguments\": ");
        out.Content(c.arguments.empty() ? "{}" : c.arguments).Markup(", \"id\": \"").Content(c.id).Markup("\"}");
      }
      out.Markup("]").Markup(eos_);
    } else if (m.role == "assistant") {
      out.Markup(" ").Content(StripPythonWhitespace(m.content)).Markup(eos_);
    } else if (m.role == "tool") {
      out.Markup("[TOOL_RESULTS] {\"content\": ").Content(m.content).Markup(", \"call_id\": \"");
      out.Content(m.tool_call_id).Markup("\"}[/TOOL_RESULTS]");
    } else {
      return InvalidArgumentError(
          "Only user and assistant roles are supported, with the exception of an initial optional system message!");
    }
  }
  return out.Take();
}

}  // namespace kvserve
