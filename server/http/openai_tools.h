// OpenAI function calling over HTTP (internal to server/http): the request's tools and
// tool_choice, the tool fields of chat messages, and the tool_calls of responses and chunks.
//
//   tools               [{"type": "function", "function": {"name", "description", "parameters",
//                       "strict"}}]; names [a-zA-Z0-9_-]{1,64}, distinct
//   tool_choice         "none" | "auto" (default) | "required" |
//                       {"type": "function", "function": {"name"}} (a tool of the request)
//   parallel_tool_calls bool (default true)
//   messages            assistant: "tool_calls": [{"id", "type": "function", "function":
//                       {"name", "arguments"}}] (arguments: JSON text, or an object);
//                       role "tool": "tool_call_id", "name" (else the name of the call it answers)
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "server/api/error_mapping.h"
#include "server/api/tool_calls.h"

namespace kvserve {

// Reads the tool fields of a chat request body. False (and *error, naming the field) on a bad one.
[[nodiscard]] bool ParseToolFields(const nlohmann::ordered_json& body, ToolRequest* out, ApiError* error);

// An assistant message's tool_calls and a tool message's tool_call_id and name (`where`:
// "messages[i]"). False (and *error) on a bad one.
[[nodiscard]] bool ParseMessageToolFields(const nlohmann::ordered_json& message, const std::string& where,
                                          ChatMessage* out, ApiError* error);
// Tool messages without a name get the name of the call they answer.
void NameToolResults(std::vector<ChatMessage>* messages);

// [{"id", "type": "function", "function": {"name", "arguments"}}]
nlohmann::ordered_json ToolCallsJson(std::span<const ToolCall> calls);
// A chunk's delta.tool_calls: [{"index", "id", "type", "function": {"name", "arguments"}}], id,
// type and name in a call's first fragment only.
nlohmann::ordered_json ToolCallDeltasJson(std::span<const ToolCallParser::CallFragment> fragments);

// JSON text as Jinja's tojson writes it: ", " and ": " separators (indent < 0), or indented by
// `indent` with ": " (Python's json.dumps(indent=4)); non-ASCII characters raw.
std::string PythonJsonDump(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace kvserve
