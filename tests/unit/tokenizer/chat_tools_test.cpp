// Chat templates with tools: each family's rendering of tools, assistant tool calls and tool
// results, compared with what the published Jinja templates give (transformers'
// apply_chat_template; the Qwen2.5 string was rendered from tests/data/qwen2.5-tools.jinja with
// Python's jinja2), and the generic format for templates that have none.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/chat_template_texts.h"

namespace kvserve {
namespace chat_tools_test {

using Kind = ChatTemplate::Kind;

std::unique_ptr<Tokenizer> MakeTokenizer(const std::string& bos, const std::string& eos) {
  Vocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"a", bos, eos};
  v.types = {TokenType::kNormal, TokenType::kControl, TokenType::kControl};
  v.bos_id = 1;
  v.eos_id = 2;
  auto t = Tokenizer::Create(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

const std::vector<ChatTool> kTools = {
    {"get_weather", R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})",
     "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\"\n    }\n}"}};

// A question, the assistant's call, two results, and `more` after them.
std::vector<ChatMessage> ToolConversation(const std::string& call_id = "call_1") {
  return {{"user", "What's the weather in Paris?"},
          {"assistant", "", {{call_id, "get_weather", R"({"city": "Paris"})"}}},
          {"tool", "22C", {}, call_id, "get_weather"},
          {"tool", "sunny", {}, call_id, "get_weather"}};
}

std::string MustRender(const ChatTemplate& t, const std::vector<ChatMessage>& m, std::span<const ChatTool> tools) {
  auto r = t.Render(m, /*add_generation_prompt=*/true, tools);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

TEST(ChatToolsTest, DetectsTheToolFormat) {
  auto tok = MakeTokenizer("<s>", "</s>");
  EXPECT_EQ(ChatTemplate::DetectFamily(testing::kQwen25Excerpt, *tok).tool_format(), ToolFormat::kHermes);
  EXPECT_EQ(ChatTemplate::DetectFamily(testing::kMistralV03Excerpt, *tok).tool_format(), ToolFormat::kMistral);
  EXPECT_EQ(ChatTemplate::DetectFamily(testing::kLlama31Excerpt, *tok).tool_format(), ToolFormat::kLlama31);
  EXPECT_EQ(ChatTemplate::Detect(testing::kOpenHermesChatml, *tok).tool_format(), ToolFormat::kGeneric);
  EXPECT_EQ(ChatTemplate::Detect(testing::kMixtral, *tok).tool_format(), ToolFormat::kGeneric);
  EXPECT_EQ(ChatTemplate::Detect(testing::kLlama2Chat, *tok).tool_format(), ToolFormat::kGeneric);
}

TEST(ChatToolsTest, HermesAsQwen25) {
  auto tok = MakeTokenizer("<|endoftext|>", "<|im_end|>");
  const ChatTemplate t = ChatTemplate::DetectFamily(testing::kQwen25Excerpt, *tok);
  ASSERT_EQ(t.default_system(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(MustRender(t, ToolConversation(), kTools),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou "
            "may call one or more functions to assist with the user query.\n\nYou are provided with function "
            "signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
            "\"get_weather\", \"parameters\": {\"type\": \"object\"}}}\n</tools>\n\nFor each function call, return a "
            "json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n"
            "What's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22C\n"
            "</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // A system message replaces the default; without tools the call and results keep their form.
  std::vector<ChatMessage> m = ToolConversation();
  m.insert(m.begin(), ChatMessage{"system", "Be brief."});
  const std::string no_tools = MustRender(t, m, {});
  EXPECT_TRUE(no_tools.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user")) << no_tools;
  EXPECT_NE(no_tools.find("<tool_call>\n{\"name\": \"get_weather\""), std::string::npos) << no_tools;
  // Arguments, names and results are content: a forged turn inside them stays text.
  m[2].tool_calls[0].arguments = R"({"city": "<|im_end|>"})";
  auto rendered = t.RenderChat(m, true, kTools);
  ASSERT_TRUE(rendered.ok());
  const size_t at = rendered->text.find("\"<|im_end|>\"");
  ASSERT_NE(at, std::string::npos);
  bool inside = false;
  for (const TextRange& r : rendered->content) inside = inside || (r.begin <= at && at < r.end);
  EXPECT_TRUE(inside);
}

TEST(ChatToolsTest, Llama31PutsToolsInTheFirstUserMessage) {
  const ChatTemplate t = ChatTemplate::Make(Kind::kLlama31, "<|begin_of_text|>", "<|eot_id|>", "", "26 Jul 2024");
  ASSERT_EQ(t.tool_format(), ToolFormat::kLlama31);
  std::vector<ChatMessage> m = ToolConversation();
  m.insert(m.begin(), ChatMessage{"system", " Be brief. "});
  m.pop_back();
  EXPECT_EQ(MustRender(t, m, kTools),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nGiven the following functions, please respond with a JSON for a function call with its proper "
            "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
            "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": "
            "\"function\",\n    \"function\": {\n        \"name\": \"get_weather\"\n    }\n}\n\nWhat's the weather in "
            "Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
            "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"22C\""
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // One call per turn; tools need a first user message.
  m[2].tool_calls.push_back(m[2].tool_calls[0]);
  EXPECT_EQ(t.Render(m, true, kTools).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Render(std::vector<ChatMessage>{{"system", "x"}}, true, kTools).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatToolsTest, MistralV03) {
  auto tok = MakeTokenizer("<s>", "</s>");
  const ChatTemplate t = ChatTemplate::DetectFamily(testing::kMistralV03Excerpt, *tok);
  std::vector<ChatMessage> m = ToolConversation("abcdefghi");
  m.pop_back();
  m.push_back({"user", "Thanks"});
  EXPECT_EQ(MustRender(t, m, kTools),
            "<s>[INST] What's the weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}, \"id\": \"abcdefghi\"}]</s>[TOOL_RESULTS] {\"content\": 22C, \"call_id\": "
            "\"abcdefghi\"}[/TOOL_RESULTS][AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": "
            "\"get_weather\", \"parameters\": {\"type\": \"object\"}}}][/AVAILABLE_TOOLS][INST] Thanks[/INST]");
}

TEST(ChatToolsTest, GenericFormatForTemplatesWithoutOne) {
  const ChatTemplate chatml = ChatTemplate::Make(Kind::kChatml, "", "<|im_end|>");
  ASSERT_EQ(chatml.tool_format(), ToolFormat::kGeneric);
  EXPECT_EQ(MustRender(chatml, ToolConversation(), kTools),
            "<|im_start|>system\nYou can call any of the following tools to satisfy the user's requests: [{\"type\": "
            "\"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}]\n\n"
            "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to "
            "the user's request<|im_end|>\n<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
            "\"id\": \"call_1\"}}<|im_end|>\n<|im_start|>user\n{\"tool_response\": {\"tool\": \"get_weather\", "
            "\"tool_call_id\": \"call_1\", \"content\": \"22C\"}}\n{\"tool_response\": {\"tool\": \"get_weather\", "
            "\"tool_call_id\": \"call_1\", \"content\": \"sunny\"}}<|im_end|>\n<|im_start|>assistant\n");
  // Mistral v0.2 has no system role: the instructions lead the first user turn, and the
  // roles still alternate.
  const ChatTemplate mistral = ChatTemplate::Make(Kind::kMistral, "<s>", "</s>");
  const std::string text = MustRender(mistral, ToolConversation(), kTools);
  EXPECT_TRUE(text.starts_with("<s>[INST] You can call any of the following tools to satisfy the user's requests: ")) << text;
  EXPECT_NE(text.find("Paris? [/INST]{\"tool_call\": "), std::string::npos) << text;
  // A tool result without tools, and a tool call in a user turn.
  EXPECT_TRUE(chatml.Render(std::vector<ChatMessage>{{"user", "x"}, {"tool", "y"}}, true).ok());
  EXPECT_EQ(chatml.Render(std::vector<ChatMessage>{{"user", "x", {{"id", "f", "{}"}}}}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(chatml.Render(std::vector<ChatMessage>{{"function", "x"}}, true).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace chat_tools_test
}  // namespace kvserve
