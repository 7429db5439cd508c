// Chat over HTTP with the model's own Jinja template (issue 55): rendering endpoints and
// chat_template_kwargs, reasoning apart from content for <think> templates and harmony's
// channels, streamed and not.
#include "tests/unit/server/front_ends_fixture.h"

namespace kvserve {
namespace front_ends_test {

// Issue 55: a Jinja template given as --chat-template renders every chat request, with the
// request's chat_template_kwargs and add_generation_prompt; /apply-template shows the text,
// /tokenize its tokens, and a template that raises refuses the request with its message.
TEST_F(FrontEndsTest, ChatRendersWithTheGivenJinjaTemplate) {
  chat_template_ =
      "{%- if messages[0].role == 'system' and messages | length == 1 %}{{ raise_exception('a system message "
      "alone') }}{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{%- if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}"
      "[nothink]{% endif %}{% endif %}";
  Start(::kvserve::testing::TestConfig());
  const json hi = json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto [s1, b1] = Http("POST", "/apply-template", {{"messages", hi}});
  EXPECT_EQ(s1, 200);
  EXPECT_EQ(b1["prompt"], "<user>Hi<assistant>");
  auto [s2, b2] = Http("POST", "/apply-template", {{"messages", hi}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(b2["prompt"], "<user>Hi<assistant>[nothink]");
  auto [s3, b3] = Http("POST", "/apply-template", {{"messages", hi}, {"add_generation_prompt", false}});
  EXPECT_EQ(b3["prompt"], "<user>Hi");
  auto [s4, b4] = Http("POST", "/v1/chat/completions",
                       {{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}, {"max_tokens", 2}});
  EXPECT_EQ(s4, 400);
  EXPECT_EQ(b4["error"]["message"], "a system message alone");
  // /tokenize gives the tokens the chat request is prompted with.
  auto [s5, b5] = Http("POST", "/tokenize", {{"messages", hi}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  auto [s6, b6] = Http("POST", "/tokenize", {{"prompt", "<user>Hi<assistant>[nothink]"}});
  EXPECT_EQ(b5["tokens"], b6["tokens"]);
  auto [s7, b7] = Http("POST", "/v1/chat/completions",
                       {{"messages", hi}, {"chat_template_kwargs", {{"enable_thinking", false}}}, {"max_tokens", 2}});
  EXPECT_EQ(s7, 200);
  EXPECT_EQ(b7["usage"]["prompt_tokens"], b5["count"]);
  auto [s8, b8] = Http("POST", "/v1/chat/completions", {{"messages", hi}, {"chat_template_kwargs", "no"}});
  EXPECT_EQ(s8, 400);
  EXPECT_EQ(b8["error"]["param"], "chat_template_kwargs");
}

// Issue 55: with a template whose generation prompt opens <think>, the reply is reasoning until
// it closes the tag: message.reasoning_content and .reasoning (and the streamed deltas) carry
// exactly the text a plain completion of the same prompt gives, and the content stays empty.
TEST_F(FrontEndsTest, ReasoningComesApartWhenThePromptOpensThinking) {
  chat_template_ = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant><think>\n"
                   "{#- a reply ends its thinking with </think> #}";
  Start(::kvserve::testing::TestConfig());
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
                     {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  auto [s1, b1] = Http("POST", "/apply-template", chat);
  ASSERT_EQ(s1, 200);
  auto [s2, plain] = Http("POST", "/v1/completions", {{"prompt", b1["prompt"]}, {"max_tokens", 12}, {"temperature", 0},
                                                      {"ignore_eos", true}});
  ASSERT_EQ(s2, 200);
  const std::string expected = plain["choices"][0]["text"];
  ASSERT_FALSE(expected.empty());
  auto [s3, reply] = Http("POST", "/v1/chat/completions", chat);
  ASSERT_EQ(s3, 200) << reply.dump();
  const json& message = reply["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], expected);
  EXPECT_EQ(message["reasoning"], expected);
  EXPECT_EQ(message["content"], "");
  // Every generated token was reasoning (OpenAI's usage.completion_tokens_details).
  EXPECT_EQ(reply["usage"]["completion_tokens_details"]["reasoning_tokens"], reply["usage"]["completion_tokens"]);
  // Streamed: the reasoning deltas add up to the same text; no content delta carries it.
  std::string reasoning, reasoning_alias, content;
  json streamed_usage;
  json with_usage = chat;
  with_usage["stream_options"] = {{"include_usage", true}};
  for (const json& event : Events(Stream("/v1/chat/completions", with_usage))) {
    if (event.contains("usage") && !event["usage"].is_null()) streamed_usage = event["usage"];
    if (event["choices"].empty()) continue;
    const json& delta = event["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    reasoning_alias += delta.value("reasoning", "");
    content += delta.value("content", "");
  }
  EXPECT_EQ(reasoning, expected);
  EXPECT_EQ(reasoning_alias, expected);
  EXPECT_EQ(content, "");
  EXPECT_EQ(streamed_usage["completion_tokens_details"]["reasoning_tokens"], streamed_usage["completion_tokens"]);

  // The Responses API: a reasoning item before the message, streamed and not.
  const json turn = {{"input", "Once upon a time"}, {"max_output_tokens", 12}, {"temperature", 0}, {"store", false}};
  auto [s4, response] = Http("POST", "/v1/responses", turn);
  ASSERT_EQ(s4, 200) << response.dump();
  ASSERT_EQ(response["output"].size(), 2u) << response.dump();
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], expected);
  EXPECT_EQ(response["output"][1]["type"], "message");
  EXPECT_EQ(response["output"][1]["content"][0]["text"], "");
  std::string thought;
  int message_index = -1;
  for (const json& event : Events(Stream("/v1/responses", turn))) {
    if (event.value("type", "") == "response.reasoning_text.delta") thought += event.value("delta", "");
    if (event.value("type", "") == "response.output_item.added" && event["item"]["type"] == "message") {
      message_index = event["output_index"];
    }
  }
  EXPECT_EQ(thought, expected);
  EXPECT_EQ(message_index, 1);
}

// Issue 55: a harmony template (gpt-oss's channels): the analysis channel is reasoning, the
// final channel content, streamed and not, against the raw text a plain completion of the same
// prompt gives. The random test model writes harmony only when held to it: the request's
// grammar (llama.cpp's field) spells the channels.
TEST_F(FrontEndsTest, HarmonyChannelsComeApart) {
  chat_template_ = "{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}"
                   "<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";
  Start(::kvserve::testing::TestConfig());
  const std::string grammar =
      "root ::= \"<|channel|>analysis<|message|>\" w \"<|end|><|start|>assistant<|channel|>final<|message|>\" w\n"
      "w ::= [a-z] [a-z ]{1,12}";
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
                     {"max_tokens", 160}, {"temperature", 0}, {"grammar", grammar}};
  auto [s1, b1] = Http("POST", "/apply-template", chat);
  ASSERT_EQ(s1, 200);
  auto [s2, plain] = Http("POST", "/v1/completions", {{"prompt", b1["prompt"]}, {"max_tokens", 160}, {"temperature", 0},
                                                      {"grammar", grammar}});
  ASSERT_EQ(s2, 200) << plain.dump();
  const std::string raw = plain["choices"][0]["text"];
  const std::string open = "<|channel|>analysis<|message|>", close = "<|end|>";
  const std::string final = "<|channel|>final<|message|>";
  ASSERT_NE(raw.find(final), std::string::npos) << raw << " (the analysis must end within max_tokens)";
  const std::string thought = raw.substr(open.size(), raw.find(close) - open.size());
  const std::string answer = raw.substr(raw.find(final) + final.size());
  auto [s3, reply] = Http("POST", "/v1/chat/completions", chat);
  ASSERT_EQ(s3, 200) << reply.dump();
  const json& message = reply["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], thought);
  EXPECT_EQ(message["reasoning"], thought);
  EXPECT_EQ(message["content"], answer);
  const int reasoning_tokens = reply["usage"]["completion_tokens_details"]["reasoning_tokens"];
  EXPECT_GT(reasoning_tokens, 0);
  EXPECT_LT(reasoning_tokens, reply["usage"]["completion_tokens"].get<int>());
  std::string reasoning, content;
  for (const json& event : Events(Stream("/v1/chat/completions", chat))) {
    if (event["choices"].empty()) continue;
    const json& delta = event["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    content += delta.value("content", "");
  }
  EXPECT_EQ(reasoning, thought);
  EXPECT_EQ(content, answer);
}

// Issue 55, item 7: a chat session reuses what the template renders the same way on the next
// turn. A template that keeps past reasoning renders the whole previous turn again: all of it
// comes from the cache. One that drops it (Qwen3's) renders the previous reply without its
// <think> part: the cache serves the turn up to where the reply began, and the rest is computed.
TEST_F(FrontEndsTest, SessionsReuseWhatTheTemplateRendersAgain) {
  const std::string head = "{%- for m in messages %}<|im_start|>{{ m.role }}\n";
  const std::string tail = "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  const std::string keeps = head + "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}" + tail;
  const std::string drops = head + "{% if m.reasoning_content and loop.last %}<think>{{ m.reasoning_content }}</think>{% endif %}" + tail;
  for (const bool keep : {true, false}) {
    SCOPED_TRACE(keep ? "keeps past reasoning" : "drops past reasoning");
    chat_template_ = keep ? keeps : drops;
    Start(::kvserve::testing::TestConfig());
    json messages = json::array({{{"role", "user"}, {"content", "Tell me a story about a dog."}}});
    const json first_turn = {{"messages", messages}, {"session_id", "chat"}, {"max_tokens", 64}, {"temperature", 0},
                             {"grammar", "root ::= \"<think>\" [a-z]{4,8} \"</think>\" [a-z]{4,8}"}};
    auto [s1, first] = Http("POST", "/v1/chat/completions", first_turn);
    ASSERT_EQ(s1, 200) << first.dump();
    const json& reply = first["choices"][0]["message"];
    ASSERT_FALSE(reply.value("reasoning_content", "").empty()) << first.dump();
    messages.push_back({{"role", "assistant"}, {"content", reply["content"]}, {"reasoning_content", reply["reasoning_content"]}});
    messages.push_back({{"role", "user"}, {"content", "And then?"}});
    auto [s2, second] = Http("POST", "/v1/chat/completions",
                             {{"messages", messages}, {"session_id", "chat"}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(s2, 200) << second.dump();
    const int cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
    const int first_prompt = first["usage"]["prompt_tokens"], first_total = first["usage"]["total_tokens"];
    std::printf("%s: turn 1 %d prompt + %d reply tokens; turn 2 reused %d\n", keep ? "keeps" : "drops", first_prompt,
                first_total - first_prompt, cached);
    if (keep) {
      // All but the reply's last tokens: the last was never computed, and the model's own
      // split of the words (held to the grammar) may differ from the tokenizer's.
      EXPECT_GE(cached, first_total - 3);
      EXPECT_GT(cached, first_prompt + 4);
    } else {
      EXPECT_GE(cached, first_prompt - 1);
      EXPECT_LT(cached, first_prompt + 2) << "the dropped reasoning cannot come from the cache";
    }
    Stop();
  }
}

}  // namespace front_ends_test
}  // namespace kvserve
