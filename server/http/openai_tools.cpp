// OpenAI function calling over HTTP (see openai_tools.h).
#include "server/http/openai_tools.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;
using Choice = ToolRequest::Choice;

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

bool Fail(ApiError* error, const std::string& param, const std::string& message) {
  *error = InvalidField(param, message);
  return false;
}

void DumpTo(const json& v, int indent, int level, std::string* out) {
  const std::string pad = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ');
  const std::string close_pad = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * level), ' ');
  const char* comma = indent < 0 ? ", " : ",";
  if (v.is_object() && !v.empty()) {
    *out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      *out += (first ? "" : comma) + pad + json(key).dump() + ": ";
      DumpTo(value, indent, level + 1, out);
      first = false;
    }
    *out += close_pad + '}';
  } else if (v.is_array() && !v.empty()) {
    *out += '[';
    bool first = true;
    for (const json& value : v) {
      *out += (first ? "" : comma) + pad;
      DumpTo(value, indent, level + 1, out);
      first = false;
    }
    *out += close_pad + ']';
  } else {
    *out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

std::string PythonJsonDump(const json& value, int indent) {
  std::string out;
  DumpTo(value, indent, 0, &out);
  return out;
}

bool ParseToolFields(const json& body, ToolRequest* out, ApiError* error) {
  auto field = [&](const char* name) -> const json* {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* tools = field("tools")) {
    if (!tools->is_array()) return Fail(error, "tools", "'tools' must be an array");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object() || t.value("type", "") != "function") {
        return Fail(error, where + ".type", fmt::format("'{}' must be an object with \"type\": \"function\"", where));
      }
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return Fail(error, where + ".function", fmt::format("'{}.function' must be an object", where));
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
        return Fail(error, where + ".function.name",
                    fmt::format("'{}.function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", where));
      }
      ToolDefinition def;
      def.chat.name = name->get<std::string>();
      if (!names.insert(def.chat.name).second) {
        return Fail(error, where + ".function.name", fmt::format("two tools are named '{}'", def.chat.name));
      }
      if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
        if (!params->is_object()) return Fail(error, where + ".function.parameters", fmt::format("'{}.function.parameters' must be a JSON Schema object", where));
        def.parameters = params->dump();
      }
      if (auto strict = fn->find("strict"); strict != fn->end() && !strict->is_null()) {
        if (!strict->is_boolean()) return Fail(error, where + ".function.strict", fmt::format("'{}.function.strict' must be a boolean", where));
        def.strict = strict->get<bool>();
      }
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
        return Fail(error, where + ".function.description", fmt::format("'{}.function.description' must be a string", where));
      }
      def.chat.json = PythonJsonDump(t);
      def.chat.json_indented = PythonJsonDump(t, 4);
      out->tools.push_back(std::move(def));
    }
  }
  if (const json* p = field("parallel_tool_calls")) {
    if (!p->is_boolean()) return Fail(error, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out->parallel = p->get<bool>();
  }
  if (const json* c = field("tool_choice")) {
    constexpr char kShape[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                              "\"function\": {\"name\": ...}}";
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") {
        out->choice = Choice::kNone;
      } else if (s == "auto") {
        out->choice = Choice::kAuto;
      } else if (s == "required") {
        out->choice = Choice::kRequired;
      } else {
        return Fail(error, "tool_choice", kShape);
      }
    } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      out->choice = Choice::kFunction;
      out->function = (*c)["function"]["name"].get<std::string>();
      const bool known = std::any_of(out->tools.begin(), out->tools.end(),
                                     [&](const ToolDefinition& t) { return t.chat.name == out->function; });
      if (!known) return Fail(error, "tool_choice", fmt::format("'tool_choice' names '{}', which is not in 'tools'", out->function));
    } else {
      return Fail(error, "tool_choice", kShape);
    }
    if (out->tools.empty() && out->choice == Choice::kRequired) {
      return Fail(error, "tool_choice", "'tool_choice' \"required\" needs 'tools'");
    }
  }
  return true;
}

bool ParseMessageToolFields(const json& m, const std::string& where, ChatMessage* out, ApiError* error) {
  if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
    if (out->role != "assistant") return Fail(error, where + ".tool_calls", fmt::format("only assistant messages have '{}.tool_calls'", where));
    if (!calls->is_array()) return Fail(error, where + ".tool_calls", fmt::format("'{}.tool_calls' must be an array", where));
    for (size_t k = 0; k < calls->size(); ++k) {
      const json& c = (*calls)[k];
      const std::string cw = fmt::format("{}.tool_calls[{}]", where, k);
      auto fn = c.is_object() ? c.find("function") : c.end();
      if (fn == c.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        return Fail(error, cw + ".function", fmt::format("'{}.function' must be an object with a 'name'", cw));
      }
      ChatToolCall call;
      call.name = (*fn)["name"].get<std::string>();
      if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
      const json args = fn->value("arguments", json("{}"));
      if (args.is_string()) {
        call.arguments = args.get<std::string>();
      } else if (args.is_object()) {
        call.arguments = PythonJsonDump(args);
      } else if (!args.is_null()) {
        return Fail(error, cw + ".function.arguments", fmt::format("'{}.function.arguments' must be a string", cw));
      }
      out->tool_calls.push_back(std::move(call));
    }
  }
  if (out->role == "tool") {
    for (const char* key : {"tool_call_id", "name"}) {
      auto v = m.find(key);
      if (v == m.end() || v->is_null()) continue;
      if (!v->is_string()) return Fail(error, where + "." + key, fmt::format("'{}.{}' must be a string", where, key));
      (key[0] == 'n' ? out->name : out->tool_call_id) = v->get<std::string>();
    }
  }
  return true;
}

void NameToolResults(std::vector<ChatMessage>* messages) {
  std::map<std::string, std::string> names;  // call id -> function
  for (ChatMessage& m : *messages) {
    for (const ChatToolCall& c : m.tool_calls) names[c.id] = c.name;
    if (m.role == "tool" && m.name.empty()) {
      if (auto it = names.find(m.tool_call_id); it != names.end()) m.name = it->second;
    }
  }
}

json ToolCallsJson(std::span<const ToolCall> calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

json ToolCallDeltasJson(std::span<const ToolCallParser::CallFragment> fragments) {
  json out = json::array();
  for (const ToolCallParser::CallFragment& f : fragments) {
    json d{{"index", f.index}};
    json fn = json::object();
    if (!f.id.empty()) {
      d["id"] = f.id;
      d["type"] = "function";
      fn["name"] = f.name;
    }
    fn["arguments"] = f.arguments;
    d["function"] = std::move(fn);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kvserve
