// Tool calls: the parser against the text each family's model writes, fed whole and in every
// split (streamed fragments must concatenate to the exact arguments, closing braces included),
// and ToolCallSpec's grammars, which must accept those texts and refuse wrong names and
// arguments (checked with the engine's GrammarMatcher over a real vocabulary).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/grammar/structured_output.h"
#include "server/api/tool_calls.h"
#include "tests/shared_tokenizer.h"

namespace kvserve {
namespace tool_calls_test {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;  // from the fragments
};

// Feeds `text` in pieces of `step` bytes (0: whole) and rebuilds the calls from the fragments:
// id and name once, arguments concatenated.
Parsed Parse(const ToolSyntax& syntax, const std::string& text, size_t step = 0,
             std::span<const ToolDefinition> tools = {}) {
  ToolCallParser parser(syntax, tools);
  Parsed p;
  auto take = [&](const ToolCallParser::Delta& d) {
    p.content += d.content;
    for (const ToolCallParser::CallFragment& f : d.calls) {
      if (f.index == static_cast<int>(p.calls.size())) {
        EXPECT_FALSE(f.id.empty());
        EXPECT_FALSE(f.name.empty());
        p.calls.push_back({f.id, f.name, ""});
      } else {
        EXPECT_EQ(f.index + 1, static_cast<int>(p.calls.size()));
        EXPECT_TRUE(f.id.empty() && f.name.empty()) << "id and name come once";
      }
      p.calls.back().arguments += f.arguments;
    }
  };
  if (step == 0) step = text.size();
  for (size_t i = 0; i < text.size(); i += step) take(parser.Feed(std::string_view(text).substr(i, step)));
  take(parser.Finish());
  // The complete-response view agrees with the streamed one.
  EXPECT_EQ(parser.content(), p.content);
  EXPECT_EQ(parser.calls().size(), p.calls.size());
  for (size_t i = 0; i < std::min(parser.calls().size(), p.calls.size()); ++i) {
    EXPECT_EQ(parser.calls()[i].arguments, p.calls[i].arguments);
    EXPECT_EQ(parser.calls()[i].id, p.calls[i].id);
  }
  return p;
}

// Every split size gives the same content and calls.
void ExpectParses(const ToolSyntax& syntax, const std::string& text, const std::string& content,
                  const std::vector<std::pair<std::string, std::string>>& calls,
                  std::span<const ToolDefinition> tools = {}) {
  for (size_t step : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{13}}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Parsed p = Parse(syntax, text, step, tools);
    EXPECT_EQ(p.content, content);
    ASSERT_EQ(p.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, calls[i].first);
      EXPECT_EQ(p.calls[i].arguments, calls[i].second);
      EXPECT_FALSE(nlohmann::json::parse(p.calls[i].arguments, nullptr, false).is_discarded());
    }
  }
}

constexpr char kTricky[] = R"({"city": "Paris", "q": "a}b\"{", "deep": {"x": [1, {"y": "]"}]}})";

TEST(ToolCallParserTest, Hermes) {
  const std::string text = std::string("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ") +
                           kTricky + "}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>";
  ExpectParses(ToolSyntax::Hermes(), text, "Let me check.", {{"get_weather", kTricky}, {"time", "{}"}});
  ExpectParses(ToolSyntax::Hermes(), "No tools needed: 1 < 2, {x}.", "No tools needed: 1 < 2, {x}.", {});
  // A call without its closing tag at the end still counts.
  ExpectParses(ToolSyntax::Hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "", {{"f", "{\"a\": 1}"}});
  const Parsed p = Parse(ToolSyntax::Hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  EXPECT_TRUE(p.calls[0].id.starts_with("call_")) << p.calls[0].id;
  EXPECT_EQ(p.calls[0].id.size(), 29u);
}

TEST(ToolCallParserTest, Mistral) {
  const std::string text = std::string("[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": ") + kTricky +
                           ", \"id\": \"abcdefghi\"}, {\"name\": \"b\", \"arguments\": {}}]";
  ExpectParses(ToolSyntax::Mistral(), text, "", {{"a", kTricky}, {"b", "{}"}});
  const Parsed p = Parse(ToolSyntax::Mistral(), text);
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // the template's id length
}

TEST(ToolCallParserTest, Llama31) {
  ExpectParses(ToolSyntax::Llama31(), std::string("{\"name\": \"f\", \"parameters\": ") + kTricky + "}", "", {{"f", kTricky}});
  ExpectParses(ToolSyntax::Llama31(), "{ \"name\" : \"f\" , \"parameters\" : {}}", "", {{"f", "{}"}});
  ExpectParses(ToolSyntax::Llama31(), "Hello {world} and {\"a\": 1}", "Hello {world} and {\"a\": 1}", {});
}

TEST(ToolCallParserTest, Generic) {
  ExpectParses(ToolSyntax::Generic(), R"({"tool_call": {"name": "f", "arguments": {"a": 1}}})", "", {{"f", R"({"a":1})"}});
  ExpectParses(ToolSyntax::Generic(), R"({"tool_calls": [{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"b": [2]}}]})",
               "", {{"f", "{}"}, {"g", R"({"b":[2]})"}});
  ExpectParses(ToolSyntax::Generic(), R"({"response": "Hi \"there\""})", "Hi \"there\"", {});
  ExpectParses(ToolSyntax::Generic(), "not json", "not json", {});
}

// A text that ends inside a call (max_tokens) or does not parse is content, whole.
TEST(ToolCallParserTest, IncompleteOrMalformedCallsAreContent) {
  const std::string cut = "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2";
  ToolCallParser parser(ToolSyntax::Hermes());
  const ToolCallParser::Delta d = parser.Feed(cut);
  EXPECT_EQ(d.content, "Sure.");
  ASSERT_EQ(d.calls.size(), 1u);  // streamed: the call's start went out
  EXPECT_EQ(d.calls[0].arguments, "{\"a\": [1, 2");
  EXPECT_TRUE(parser.Finish().empty());
  EXPECT_TRUE(parser.calls().empty());
  EXPECT_EQ(parser.content(), cut);  // a complete response: the text as it came
  ExpectParses(ToolSyntax::Hermes(), "<tool_call>\nnot json</tool_call>", "<tool_call>\nnot json</tool_call>", {});
  ExpectParses(ToolSyntax::Mistral(), "[TOOL_CALLS] oops", "[TOOL_CALLS] oops", {});
}

// The grammars accept what the parser reads, and refuse other names and bad arguments.
TEST(ToolCallSpecTest, GrammarsAcceptTheFamiliesCalls) {
  auto tok = testing::LoadSharedTokenizer("gpt-2");
  ASSERT_NE(tok, nullptr);
  GrammarCache cache(tok.get());
  ToolRequest request;
  request.tools = {{{"get_weather", "", ""}, R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false})", true},
                   {{"time", "", ""}, "", false}};
  auto accepts = [&](const StructuredOutputSpec& spec, const std::string& text) {
    auto compiled = cache.Get(spec);
    EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
    if (!compiled.ok()) return false;
    GrammarMatcher m(compiled->grammar);
    return m.AcceptBytes(text) && m.CanEnd();
  };
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";
  const std::string time = R"({"name": "time", "arguments": {}})";
  for (ToolRequest::Choice choice : {ToolRequest::Choice::kRequired, ToolRequest::Choice::kAuto}) {
    request.choice = choice;
    SCOPED_TRACE(static_cast<int>(choice));
    const StructuredOutputSpec hermes = ToolCallSpec(ToolSyntax::Hermes(), request);
    EXPECT_EQ(hermes.triggers.empty(), choice == ToolRequest::Choice::kRequired);
    EXPECT_TRUE(accepts(hermes, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + time + "\n</tool_call>"));
    EXPECT_FALSE(accepts(hermes, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
    EXPECT_FALSE(accepts(hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"x\"}}\n</tool_call>"));
    const StructuredOutputSpec mistral = ToolCallSpec(ToolSyntax::Mistral(), request);
    const auto with_id = [](std::string call, const char* id) { return call.insert(call.size() - 1, std::string(", \"id\": \"") + id + "\""); };
    EXPECT_TRUE(accepts(mistral, "[TOOL_CALLS] [" + with_id(weather, "a1b2c3d4e") + ", " + with_id(time, "Zz9876543") + "]"));
    EXPECT_FALSE(accepts(mistral, "[TOOL_CALLS] [" + with_id(weather, "short") + "]"));
    const StructuredOutputSpec llama = ToolCallSpec(ToolSyntax::Llama31(), request);
    EXPECT_TRUE(accepts(llama, R"({"name": "time", "parameters": {"any": [1]}})"));
    EXPECT_FALSE(accepts(llama, time));  // "arguments" is not Llama's key
    const StructuredOutputSpec generic = ToolCallSpec(ToolSyntax::Generic(), request);
    EXPECT_TRUE(generic.triggers.empty());
    EXPECT_TRUE(accepts(generic, R"({"tool_calls": [)" + weather + "]}"));
    EXPECT_EQ(accepts(generic, R"({"response": "hi"})"), choice == ToolRequest::Choice::kAuto);
  }
  // A named function, without parallel calls: that function, once.
  request.choice = ToolRequest::Choice::kFunction;
  request.function = "time";
  const StructuredOutputSpec named = ToolCallSpec(ToolSyntax::Hermes(), request);
  EXPECT_TRUE(accepts(named, "<tool_call>\n" + time + "\n</tool_call>"));
  EXPECT_FALSE(accepts(named, "<tool_call>\n" + weather + "\n</tool_call>"));
  EXPECT_FALSE(accepts(named, "<tool_call>\n" + time + "\n</tool_call>\n<tool_call>\n" + time + "\n</tool_call>"));
  request.choice = ToolRequest::Choice::kRequired;
  request.parallel = false;
  EXPECT_FALSE(accepts(ToolCallSpec(ToolSyntax::Generic(), request), R"({"tool_calls": [)" + weather + "]}"));
  EXPECT_TRUE(accepts(ToolCallSpec(ToolSyntax::Generic(), request), R"({"tool_call": )" + weather + "}"));
}

// A reply that starts inside the reasoning (a template that opens <think> in the generation
// prompt): the constraint waits for its end, then holds what follows.
TEST(ToolCallSpecTest, AfterReasoningTheConstraintStartsAtItsEnd) {
  auto tok = testing::LoadSharedTokenizer("gpt-2");
  ASSERT_NE(tok, nullptr);
  GrammarCache cache(tok.get());
  ToolRequest request;
  request.tools = {{{"time", "", ""}, R"({"type":"object","properties":{"tz":{"type":"string"}}})", false}};
  request.choice = ToolRequest::Choice::kRequired;
  StructuredOutputSpec spec = ToolCallSpec(ToolSyntax::Hermes(), request);
  ASSERT_TRUE(spec.triggers.empty());
  spec.StartAfter("</think>");
  EXPECT_EQ(spec.triggers, std::vector<std::string>{"</think>"});
  auto compiled = cache.Get(spec);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const std::string call = "<tool_call>\n{\"name\": \"time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>";
  for (const char* gap : {"", "\n\n", " \n"}) {
    GrammarMatcher m(compiled->grammar);
    EXPECT_TRUE(m.AcceptBytes(std::string("</think>") + gap + call) && m.CanEnd()) << std::string(gap).size();
  }
  GrammarMatcher m(compiled->grammar);
  EXPECT_FALSE(m.AcceptBytes("</think>\nSure, " + call));  // what follows the reasoning is held
  // A JSON Schema (response_format) and a regular expression likewise.
  StructuredOutputSpec json_spec;
  json_spec.kind = StructuredOutputSpec::Kind::kJsonObject;
  json_spec.StartAfter("</think>");
  auto json_compiled = cache.Get(json_spec);
  ASSERT_TRUE(json_compiled.ok()) << json_compiled.status().ToString();
  GrammarMatcher j(json_compiled->grammar);
  EXPECT_TRUE(j.AcceptBytes("</think>\n\n{\"a\": 1}") && j.CanEnd());
  StructuredOutputSpec regex;
  regex.kind = StructuredOutputSpec::Kind::kRegex;
  regex.text = "^(yes|no)$";
  regex.StartAfter("</think>");
  auto regex_compiled = cache.Get(regex);
  ASSERT_TRUE(regex_compiled.ok()) << regex_compiled.status().ToString();
  GrammarMatcher r(regex_compiled->grammar);
  EXPECT_TRUE(r.AcceptBytes("</think>\nyes") && r.CanEnd());
}

}  // namespace tool_calls_test
}  // namespace kvserve
