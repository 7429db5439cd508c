// ToolCallSpec (see tool_calls.h): the grammar of a request's tool calls in the template's syntax.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/api/tool_calls.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;
using Choice = ToolRequest::Choice;
using Spec = StructuredOutputSpec;

static_assert(ToolSyntax::kIdSlot == Spec::kIdSlot && ToolSyntax::kIndexSlot == Spec::kIndexSlot &&
              ToolSyntax::kIdLength == Spec::kIdLength);

// JSON whitespace allowed per gap in a call: enough for `{"name": "f", "arguments": {...}}`,
// the spacing the templates render calls with, and no room to wander.
constexpr int kToolWhitespace = 1;
constexpr int kIndentedWhitespace = 16;

json Parameters(const ToolDefinition& tool) {
  json parameters = json::parse(tool.parameters, nullptr, /*allow_exceptions=*/false);
  if (tool.parameters.empty() || parameters.is_discarded() || !parameters.is_object()) return json{{"type", "object"}};
  return parameters;
}

// {"name": <const>, "arguments": <parameters>}, in that order, nothing else.
json GenericCallSchema(const ToolDefinition& tool) {
  json properties = json::object();
  properties["name"] = json{{"const", tool.chat.name}};
  properties["arguments"] = Parameters(tool);
  return json{{"type", "object"},
              {"properties", std::move(properties)},
              {"required", json::array({"name", "arguments"})},
              {"additionalProperties", false}};
}

// The generic syntax: the whole reply is one JSON value.
Spec GenericSpec(const std::vector<const ToolDefinition*>& allowed, bool parallel, bool lazy) {
  json calls = json::array();
  for (const ToolDefinition* t : allowed) calls.push_back(GenericCallSchema(*t));
  json call = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
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
  Spec spec;
  spec.kind = Spec::Kind::kJsonSchema;
  spec.max_whitespace = kToolWhitespace;
  spec.text = answer.dump();
  return spec;
}

// A value written as markup: text that does not close an element ("</"), up to a string's
// maxLength; an enum's values; a number's or a boolean's JSON.
std::string ValuePattern(const json& schema) {
  constexpr char kText[] = "([^<]|<[^/])";
  if (!schema.is_object()) return std::string(kText) + "*";
  if (schema.contains("enum") && schema["enum"].is_array() && !schema["enum"].empty()) {
    std::string alts = "(";
    for (const json& v : schema["enum"]) {
      if (alts.size() > 1) alts += '|';
      alts += Spec::SlotPattern(v.is_string() ? v.get<std::string>() : v.dump());
    }
    return alts + ")";
  }
  const json type = schema.value("type", json());
  if (type == "integer") return "-?(0|[1-9][0-9]{0,17})";
  if (type == "number") return "-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,17})?";
  if (type == "boolean") return "(true|false)";
  if (type == "string" && schema.contains("maxLength") && schema["maxLength"].is_number_unsigned() &&
      schema["maxLength"].get<uint64_t>() <= 1000 && !schema.contains("pattern")) {
    return std::string(kText) + "{0," + std::to_string(schema["maxLength"].get<uint64_t>()) + "}";
  }
  return std::string(kText) + "*";
}

// Arguments as markup: a pattern over the calls, each call's arguments its function's
// parameters in the order of `properties` (as JSON objects are), the required ones always,
// each with a value ValuePattern allows.
Spec MarkupSpec(const ToolSyntax& s, const std::vector<const ToolDefinition*>& allowed, bool parallel) {
  const std::string mid = s.param_mid_json.empty()
                              ? Spec::SlotPattern(s.param_mid)
                              : fmt::format("({}|{})", Spec::SlotPattern(s.param_mid), Spec::SlotPattern(s.param_mid_json));
  std::string calls;
  for (const ToolDefinition* t : allowed) {
    const json params = Parameters(*t);
    const json required = params.value("required", json::array());
    std::string arguments;
    if (params.contains("properties") && params["properties"].is_object()) {
      for (const auto& [key, schema] : params["properties"].items()) {
        const bool needed = required.is_array() && std::find(required.begin(), required.end(), key) != required.end();
        arguments += '(';
        arguments += Spec::SlotPattern(s.param_begin + key) + mid + ValuePattern(schema) + Spec::SlotPattern(s.param_end);
        arguments += needed ? ")" : ")?";
      }
    } else {
      arguments = '(';
      arguments += Spec::SlotPattern(s.param_begin) + "[A-Za-z0-9_.-]+" + mid + ValuePattern(json()) +
                   Spec::SlotPattern(s.param_end) + ")*";
    }
    if (!calls.empty()) calls += '|';
    calls += Spec::SlotPattern(t->chat.name + s.name_end) + arguments;
  }
  const std::string call = Spec::SlotPattern(s.call_begin) + "(" + calls + ")" + Spec::SlotPattern(s.call_end);
  Spec spec;
  spec.kind = Spec::Kind::kRegex;
  spec.text = Spec::SlotPattern(s.begin) + call;
  if (parallel) spec.text += fmt::format("({}{})*", Spec::SlotPattern(s.separator), call);
  spec.text += Spec::SlotPattern(s.end);
  return spec;
}

}  // namespace

StructuredOutputSpec ToolCallSpec(const ToolSyntax& syntax, const ToolRequest& request) {
  std::vector<const ToolDefinition*> allowed;
  for (const ToolDefinition& t : request.tools) {
    if (request.choice != Choice::kFunction || t.chat.name == request.function) allowed.push_back(&t);
  }
  const bool strict = std::all_of(allowed.begin(), allowed.end(), [](const ToolDefinition* t) { return t->strict; });
  const bool parallel = request.parallel && request.choice != Choice::kFunction && syntax.parallel;
  const bool lazy = request.choice == Choice::kAuto;
  if (syntax.kind == ToolSyntax::Kind::kGeneric) {
    Spec spec = GenericSpec(allowed, request.parallel && request.choice != Choice::kFunction, lazy);
    spec.lenient = !strict;
    return spec;  // no trigger: the whole reply is JSON
  }
  Spec spec;
  if (syntax.xml_arguments) {
    spec = MarkupSpec(syntax, allowed, parallel);
  } else {
    json schemas = json::array();
    spec.kind = Spec::Kind::kJsonSchema;
    spec.lenient = !strict;
    // Arguments the template indents get the room of a nested layout (JsonSchemaOptions).
    spec.max_whitespace = syntax.multiline_arguments ? kIndentedWhitespace : kToolWhitespace;
    Spec::Frame& f = spec.frame;
    for (const ToolDefinition* t : allowed) {
      schemas.push_back(Parameters(*t));
      f.heads.push_back(t->chat.name + syntax.name_end);
    }
    spec.text = schemas.dump();
    f.prefix = syntax.begin;
    f.item_prefix = syntax.call_begin;
    f.item_suffix = syntax.call_end;
    f.separator = syntax.separator;
    f.suffix = syntax.end;
    f.max_items = parallel ? -1 : 1;
  }
  if (lazy) {
    // The opener up to its first whitespace: the grammar takes over from there, so a model
    // that spaces the rest its own way is still held to the syntax.
    // A leading tag ("<tool_call>", "[TOOL_CALLS]") is the trigger alone: it may be a control
    // token, which counts only as a trigger of its own.
    std::string trigger = syntax.opener();
    size_t cut = trigger.find_first_of(" \n", 1);
    const char close = trigger[0] == '<' ? '>' : trigger[0] == '[' ? ']' : '\0';
    if (close != '\0' && trigger.find(close) != std::string::npos) cut = std::min(cut, trigger.find(close) + 1);
    if (cut != std::string::npos) trigger.resize(cut);
    spec.triggers = {trigger};
  }
  return spec;
}

}  // namespace kvserve
