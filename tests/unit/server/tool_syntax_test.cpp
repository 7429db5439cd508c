// Tool syntaxes derived from real chat templates (../shared/templates): for each template, the
// syntax DeriveToolSyntax reads from it, and the round trip that matters: an assistant turn with
// tool calls, rendered by the template as the model was trained to write it, parses back into
// the same calls (names, arguments as JSON values), and the grammar of tool_choice "required"
// accepts that text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/grammar/structured_output.h"
#include "engine/tokenizer/chat_template.h"
#include "server/api/tool_calls.h"
#include "tests/shared_tokenizer.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace tool_syntax_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The family each shared template's syntax is derived as (templates not listed have none of
// their own: their tools go in the generic format).
const std::map<std::string, std::string> kDerived = {
    {"Apertus-8B-Instruct", "apertus"},
    {"Apriel-1.6-15b-Thinker-fixed", "apriel"},
    {"Bielik-11B-v3.0-Instruct", "hermes"},
    {"ByteDance-Seed-OSS", "qwen3-coder"},
    {"CohereForAI-c4ai-command-r-plus-tool_use", "command-r"},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r"},
    {"GLM-4.6", "glm"},
    {"GLM-4.7-Flash", "glm"},
    {"GigaChat3-10B-A1.8B", "derived"},
    {"GigaChat3.1-10B-A1.8B", "gigachat"},
    {"MiMo-VL", "hermes"},
    {"MiniMax-M2", "minimax"},
    {"Mistral-Small-3.2-24B-Instruct-2506", "mistral"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-coder"},
    {"NVIDIA-Nemotron-Nano-v2", "nemotron"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
    {"Qwen-QwQ-32B", "hermes"},
    {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
    {"Qwen-Qwen3-0.6B", "hermes"},
    {"Qwen3-Coder", "qwen3-coder"},
    {"Qwen3.5-4B", "qwen3-coder"},
    {"Reka-Edge", "hermes"},
    {"StepFun3.5-Flash", "qwen3-coder"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek"},
    {"deepseek-ai-DeepSeek-V3.1", "deepseek"},
    {"deepseek-ai-DeepSeek-V3.2", "deepseek-v3.2"},
    {"ibm-granite-granite-4.0", "hermes"},
    {"ibm-granite-granite-4.1", "hermes"},
    {"meetkai-functionary-medium-v3.1", "functionary"},
    {"meta-llama-Llama-3.1-8B-Instruct", "llama3.1"},
    {"meta-llama-Llama-3.2-3B-Instruct", "llama3.1"},
    {"meta-llama-Llama-3.3-70B-Instruct", "llama3.1"},
    {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "mistral"},
    {"moonshotai-Kimi-K2", "kimi-k2"},
    {"openai-gpt-oss-120b", "gpt-oss"},
    {"stepfun-ai-Step-3.5-Flash", "qwen3-coder"},
    {"unsloth-Apriel-1.5", "apriel"},
    {"unsloth-mistral-Devstral-Small-2507", "mistral"},
    {"upstage-Solar-Open-100B", "solar"},
};

std::vector<ToolDefinition> Tools() {
  const std::string weather =
      R"({"type": "object", "properties": {"city": {"type": "string", "description": "a city"}, "days": {"type": "integer", "description": "how many"}}, "required": ["city", "days"]})";
  const std::string time =
      R"({"type": "object", "properties": {"tz": {"type": "string", "description": "a time zone"}}, "required": ["tz"]})";
  std::vector<ToolDefinition> tools;
  for (const auto& [name, params] : {std::pair{std::string("get_weather"), weather}, std::pair{std::string("get_time"), time}}) {
    const std::string json = R"({"type": "function", "function": {"name": ")" + name +
                             R"(", "description": "d", "parameters": )" + params + "}}";
    tools.push_back({{name, json, json}, params, false});
  }
  return tools;
}

class SharedTemplates : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::SharedPath("templates"))) GTEST_SKIP() << "../shared/templates missing";
    tok_ = testing::LoadSharedTokenizer("gpt-2");
    ASSERT_NE(tok_, nullptr);
    for (const auto& e : fs::directory_iterator(testing::SharedPath("templates"))) {
      if (e.path().extension() == ".jinja") files_.push_back(e.path());
    }
    std::sort(files_.begin(), files_.end());
  }
  std::unique_ptr<Tokenizer> tok_;
  std::vector<fs::path> files_;
};

TEST_F(SharedTemplates, EachTemplatesToolSyntaxIsDerivedFromIt) {
  int derived = 0;
  for (const fs::path& f : files_) {
    const ChatTemplate t = ChatTemplate::Detect(ReadFile(f), *tok_);
    const ToolSyntax& s = t.tool_syntax();
    std::printf("%-50s %s\n", f.stem().c_str(), s.Describe().c_str());
    const auto it = kDerived.find(f.stem());
    if (it == kDerived.end()) {
      EXPECT_EQ(s.kind, ToolSyntax::Kind::kGeneric) << f.stem();
      continue;
    }
    ++derived;
    EXPECT_TRUE(s.derived) << f.stem();
    EXPECT_EQ(s.family, it->second) << f.stem();
  }
  EXPECT_EQ(derived, static_cast<int>(kDerived.size()));
}

// The calls a template renders parse back, and the grammar of tool_choice "required" accepts
// their text; streamed byte by byte, the fragments concatenate to the same arguments.
TEST_F(SharedTemplates, RenderedCallsParseBackAndMatchTheirGrammar) {
  const std::vector<ToolDefinition> tools = Tools();
  std::vector<ChatTool> chat_tools;
  for (const ToolDefinition& t : tools) chat_tools.push_back(t.chat);
  GrammarCache cache(tok_.get());
  std::set<std::string> families;
  for (const fs::path& f : files_) {
    const ChatTemplate t = ChatTemplate::Detect(ReadFile(f), *tok_);
    const ToolSyntax& s = t.tool_syntax();
    if (s.kind != ToolSyntax::Kind::kLiteral) continue;
    SCOPED_TRACE(f.stem().string() + ": " + s.Describe());
    std::vector<ChatToolCall> calls = {{"abcDEF123", "get_weather", R"({"city": "Paris", "days": 37})"}};
    if (s.parallel) calls.push_back({"xyzXYZ789", "get_time", R"({"tz": "Asia/Tokyo"})"});
    const std::vector<ChatMessage> messages = {{"user", "What is the weather in Paris, and the time in Tokyo?"},
                                               {"assistant", "", calls}};
    StatusOr<std::string> rendered = t.Render(messages, false, chat_tools);
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    const size_t question = rendered->rfind("Tokyo?");
    const size_t at = rendered->find(s.opener(), question);
    ASSERT_NE(at, std::string::npos) << *rendered;
    const std::string text = rendered->substr(at);

    for (const bool streamed : {false, true}) {
      ToolCallParser parser(s, tools);
      std::vector<ToolCall> got;
      auto take = [&](const ToolCallParser::Delta& d) {
        for (const ToolCallParser::CallFragment& c : d.calls) {
          if (c.index == static_cast<int>(got.size())) got.push_back({c.id, c.name, ""});
          got.back().arguments += c.arguments;
        }
      };
      if (streamed) {
        for (char ch : text) take(parser.Feed(std::string_view(&ch, 1)));
      } else {
        take(parser.Feed(text));
      }
      take(parser.Finish());
      ASSERT_EQ(got.size(), calls.size()) << text;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(got[i].name, calls[i].name);
        EXPECT_EQ(json::parse(got[i].arguments, nullptr, false), json::parse(calls[i].arguments)) << got[i].arguments;
        EXPECT_EQ(got[i].arguments, parser.calls()[i].arguments);
      }
    }

    // The grammar of a forced call takes the rendered calls: it can end after the last one.
    // (Its arguments' properties come in the order of the schema's `properties`.)
    ToolRequest request;
    request.tools = tools;
    request.choice = ToolRequest::Choice::kRequired;
    auto compiled = cache.Get(ToolCallSpec(s, request));
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    GrammarMatcher m(compiled->grammar);
    size_t ends_at = 0;
    for (size_t i = 0; i < text.size() && m.AcceptBytes(std::string_view(text).substr(i, 1)); ++i) {
      if (m.CanEnd()) ends_at = i + 1;
    }
    const size_t last_value = text.rfind(s.parallel ? "Tokyo" : "37");
    EXPECT_GT(ends_at, last_value) << "accepted: " << text.substr(0, ends_at) << "\nof: " << text;
    families.insert(s.family);
  }
  std::printf("%zu families round-trip:", families.size());
  for (const std::string& f : families) std::printf(" %s", f.c_str());
  std::printf("\n");
  EXPECT_GE(families.size(), 6u);
}

}  // namespace tool_syntax_test
}  // namespace kvserve
