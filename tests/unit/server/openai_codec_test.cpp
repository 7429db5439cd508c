// OpenAI request decoding: every prompt shape, messages, parameter types, errors naming the
// field.
#include "server/http/openai_codec.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvserve {
namespace openai_codec_test {

OpenAiRequest ParseOk(const std::string& body, ApiKind kind = ApiKind::kCompletion) {
  OpenAiRequest q;
  ApiError e;
  EXPECT_TRUE(ParseOpenAiRequest(body, kind, &q, &e)) << e.status.ToString();
  return q;
}

ApiError ParseError(const std::string& body, ApiKind kind = ApiKind::kCompletion) {
  OpenAiRequest q;
  ApiError e;
  EXPECT_FALSE(ParseOpenAiRequest(body, kind, &q, &e)) << body;
  EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.HttpStatus(), 400);
  return e;
}

TEST(OpenAiCodecTest, StringPromptAndSampling) {
  OpenAiRequest q = ParseOk(R"({"model":"m","prompt":"Once","max_tokens":7,"temperature":0,"top_p":0.5,
      "top_k":40,"min_p":0.1,"n":2,"stop":"x","seed":-3,"presence_penalty":1,"frequency_penalty":-1,
      "repetition_penalty":1.1,"ignore_eos":true,"user":"u","stream":true,
      "stream_options":{"include_usage":true},"session_id":"s","cache_salt":"c","priority":-2,"unknown":[1]})");
  EXPECT_EQ(q.model, "m");
  ASSERT_EQ(q.prompts.size(), 1u);
  EXPECT_FALSE(q.prompts[0].is_tokens);
  EXPECT_EQ(q.prompts[0].text, "Once");
  EXPECT_EQ(q.max_tokens, 7);
  EXPECT_EQ(q.sampling.temperature, 0.0f);
  EXPECT_EQ(q.sampling.top_p, 0.5f);
  EXPECT_EQ(q.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(q.sampling.min_p, 0.1f);
  EXPECT_EQ(q.n, 2);
  EXPECT_EQ(q.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(q.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(q.sampling.presence_penalty, 1.0f);
  EXPECT_EQ(q.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(q.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(q.sampling.ignore_eos);
  EXPECT_TRUE(q.stream);
  EXPECT_TRUE(q.include_usage);
  EXPECT_EQ(q.session_id, "s");
  EXPECT_EQ(q.cache_salt, "c");
  EXPECT_EQ(q.priority, -2);
  EXPECT_EQ(q.user, "u");
  EXPECT_EQ(q.sampling.logprobs, -1);
  EXPECT_FALSE(q.logprobs);
}

TEST(OpenAiCodecTest, PromptShapes) {
  OpenAiRequest tokens = ParseOk(R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_EQ(tokens.prompts.size(), 1u);
  EXPECT_TRUE(tokens.prompts[0].is_tokens);
  EXPECT_EQ(tokens.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));

  OpenAiRequest strings = ParseOk(R"({"model":"m","prompt":["a","b"]})");
  ASSERT_EQ(strings.prompts.size(), 2u);
  EXPECT_EQ(strings.prompts[1].text, "b");

  OpenAiRequest batch = ParseOk(R"({"model":"m","prompt":[[1],[2,3]]})");
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(batch.prompts[1].tokens, (std::vector<int32_t>{2, 3}));

  EXPECT_EQ(ParseError(R"({"model":"m","prompt":[]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":5})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":[1,"a"]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":[1.5]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":[99999999999]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"model":"m"})").param, "prompt");
}

TEST(OpenAiCodecTest, WrongTypesNameTheField) {
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","temperature":"hot"})").param, "temperature");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","max_tokens":"7"})").param, "max_tokens");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","max_tokens":7.5})").param, "max_tokens");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","max_tokens":-1})").param, "max_tokens");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","n":0})").param, "n");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","stream":"yes"})").param, "stream");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","stop":[1]})").param, "stop");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","logit_bias":{"abc":1}})").param, "logit_bias");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","logit_bias":{"5":"1"}})").param, "logit_bias");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","stream_options":{"include_usage":1}})").param,
            "stream_options.include_usage");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","logprobs":true})").param, "logprobs");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(ParseError(R"({"model":7,"prompt":"x"})").param, "model");
  EXPECT_EQ(ParseError(R"({"model":"m","prompt":"x","session_id":1})").param, "session_id");
}

TEST(OpenAiCodecTest, ModelMayBeOmitted) {
  // vLLM and llama.cpp serve the one model when "model" is absent; the RequestBuilder decides.
  EXPECT_EQ(ParseOk(R"({"prompt":"x"})").model, "");
  EXPECT_EQ(ParseOk(R"({"model":null,"messages":[{"role":"user","content":"x"}]})", ApiKind::kChat).model, "");
}

TEST(OpenAiCodecTest, UnimplementedParametersAreRefusedByName) {
  EXPECT_EQ(ParseError(R"({"prompt":"x","best_of":2})").param, "best_of");
  EXPECT_EQ(ParseError(R"({"prompt":"x","suffix":"end"})").param, "suffix");
  EXPECT_EQ(ParseError(R"({"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]})").param, "tools");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})",
                       ApiKind::kChat).param, "functions");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":"x"}],"function_call":"auto"})",
                       ApiKind::kChat).param, "function_call");
  // The values that mean "nothing special" are accepted.
  ParseOk(R"({"prompt":"x","best_of":1,"suffix":"","tools":[],"tool_choice":"none"})");
  ParseOk(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"},"tools":null})",
          ApiKind::kChat);
}

// Tools, tool_choice and the tool fields of messages, as the OpenAI API defines them.
TEST(OpenAiCodecTest, ToolFields) {
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  OpenAiRequest q = ParseOk(chat + R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
      {"type":"function","function":{"name":"now"}}],"tool_choice":{"type":"function","function":{"name":"now"}},
      "parallel_tool_calls":false})", ApiKind::kChat);
  ASSERT_EQ(q.tools.tools.size(), 2u);
  EXPECT_EQ(q.tools.choice, ToolRequest::Choice::kFunction);
  EXPECT_EQ(q.tools.function, "now");
  EXPECT_FALSE(q.tools.parallel);
  const ToolDefinition& w = q.tools.tools[0];
  EXPECT_TRUE(w.strict);
  EXPECT_EQ(w.chat.name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(w.parameters), nlohmann::json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})"));
  // The tool as Jinja's tojson writes it (", " and ": "), and indented by 4.
  EXPECT_EQ(q.tools.tools[1].chat.json, R"({"type": "function", "function": {"name": "now"}})");
  EXPECT_EQ(q.tools.tools[1].chat.json_indented, "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"now\"\n    }\n}");
  EXPECT_TRUE(q.tools.tools[1].parameters.empty());
  for (const char* choice : {R"("none")", R"("auto")", R"("required")"}) {
    const OpenAiRequest c = ParseOk(chat + R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":)" + choice + "}",
                                    ApiKind::kChat);
    EXPECT_EQ(c.tools.active(), std::string(choice) != R"("none")") << choice;
  }
  EXPECT_EQ(ParseOk(chat + R"("tools":[{"type":"function","function":{"name":"f"}}]})", ApiKind::kChat).tools.choice,
            ToolRequest::Choice::kAuto);  // OpenAI's default with tools

  // A conversation with a call and its result.
  const OpenAiRequest conv = ParseOk(R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}},
                                                       {"id":"call_2","type":"function","function":{"name":"g","arguments":{"b":[2]}}}]},
      {"role":"tool","tool_call_id":"call_2","content":"done"}]})", ApiKind::kChat);
  ASSERT_EQ(conv.messages.size(), 3u);
  ASSERT_EQ(conv.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(conv.messages[1].tool_calls[0].arguments, R"({"a": 1})");  // as the client sent it
  EXPECT_EQ(conv.messages[1].tool_calls[1].arguments, R"({"b": [2]})");  // an object, serialized
  EXPECT_EQ(conv.messages[2].role, "tool");
  EXPECT_EQ(conv.messages[2].tool_call_id, "call_2");
  EXPECT_EQ(conv.messages[2].name, "g");  // from the call it answers

  const std::string t = R"("tools":[{"type":"function","function":{"name":"f"}}],)";
  EXPECT_EQ(ParseError(chat + R"("tools":{}})", ApiKind::kChat).param, "tools");
  EXPECT_EQ(ParseError(chat + R"("tools":[{"type":"function","function":{"name":"a b"}}]})", ApiKind::kChat).param,
            "tools[0].function.name");
  EXPECT_EQ(ParseError(chat + R"("tools":[{"type":"function","function":{"name":"f","strict":1}}]})", ApiKind::kChat).param,
            "tools[0].function.strict");
  EXPECT_EQ(ParseError(chat + t + R"("tool_choice":"sometimes"})", ApiKind::kChat).param, "tool_choice");
  EXPECT_EQ(ParseError(chat + t + R"("tool_choice":{"type":"function","function":{"name":"g"}}})", ApiKind::kChat).param,
            "tool_choice");
  EXPECT_EQ(ParseError(chat + R"("tool_choice":"required"})", ApiKind::kChat).param, "tool_choice");
  EXPECT_EQ(ParseError(chat + t + R"("parallel_tool_calls":"yes"})", ApiKind::kChat).param, "parallel_tool_calls");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})", ApiKind::kChat).param,
            "messages[0].tool_calls[0].function");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"tool","content":"x","tool_call_id":5}]})", ApiKind::kChat).param,
            "messages[0].tool_call_id");
}

// Structured outputs as OpenAI, vLLM and llama.cpp clients send them; one at most.
TEST(OpenAiCodecTest, StructuredOutputFields) {
  using Kind = StructuredOutputSpec::Kind;
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  OpenAiRequest q = ParseOk(chat + R"("response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})", ApiKind::kChat);
  EXPECT_EQ(q.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(nlohmann::json::parse(q.structured.text), nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"));
  EXPECT_EQ(ParseOk(chat + R"("response_format":{"type":"json_object"}})", ApiKind::kChat).structured.kind, Kind::kJsonObject);
  EXPECT_EQ(ParseOk(chat + R"("response_format":{"type":"text"}})", ApiKind::kChat).structured.kind, Kind::kNone);
  EXPECT_EQ(ParseOk(R"({"prompt":"x","structured_outputs":{"regex":"[a-z]+"}})").structured.kind, Kind::kRegex);
  q = ParseOk(R"({"prompt":"x","structured_outputs":{"choice":["yes","no"]}})");
  EXPECT_EQ(q.structured.kind, Kind::kChoice);
  EXPECT_EQ(q.structured.choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(ParseOk(R"({"prompt":"x","guided_json":"{\"type\":\"boolean\"}"})").structured.text, R"({"type":"boolean"})");
  EXPECT_EQ(ParseOk(R"({"prompt":"x","guided_grammar":"root ::= \"a\""})").structured.kind, Kind::kGrammar);
  EXPECT_EQ(ParseOk(R"({"prompt":"x","guided_choice":["a"]})").structured.kind, Kind::kChoice);
  EXPECT_EQ(ParseOk(R"({"prompt":"x","guided_regex":"a|b"})").structured.kind, Kind::kRegex);
  // The field a compile error will name.
  EXPECT_EQ(ParseOk(R"({"prompt":"x","guided_regex":"a|b"})").structured_param, "guided_regex");
  EXPECT_EQ(ParseOk(chat + R"("response_format":{"type":"json_object"}})", ApiKind::kChat).structured_param,
            "response_format");
  EXPECT_EQ(ParseOk(R"({"prompt":"x","json_schema":{"type":"null"}})").structured.kind, Kind::kJsonSchema);  // llama.cpp
  EXPECT_EQ(ParseOk(R"({"prompt":"x","grammar":"root ::= [0-9]+"})").structured.kind, Kind::kGrammar);
  // Malformed ones name their field; two constraints at once are refused.
  EXPECT_EQ(ParseError(chat + R"("response_format":{"type":"xml"}})", ApiKind::kChat).param, "response_format.type");
  EXPECT_EQ(ParseError(chat + R"("response_format":{"type":"json_schema"}})", ApiKind::kChat).param,
            "response_format.json_schema");
  EXPECT_EQ(ParseError(chat + R"("response_format":"json"})", ApiKind::kChat).param, "response_format");
  EXPECT_EQ(ParseError(R"({"prompt":"x","guided_choice":[]})").param, "guided_choice");
  EXPECT_EQ(ParseError(R"({"prompt":"x","guided_regex":5})").param, "guided_regex");
  EXPECT_EQ(ParseError(R"({"prompt":"x","structured_outputs":{"xml":"<a/>"}})").param, "structured_outputs.xml");
  EXPECT_EQ(ParseError(R"({"prompt":"x","guided_regex":"a","grammar":"root ::= \"a\""})").param, "grammar");
}

TEST(OpenAiCodecTest, NIsOneRangeEverywhere) {
  EXPECT_EQ(ParseOk(R"({"prompt":"x","n":16})").n, kMaxChoices);
  EXPECT_EQ(ParseError(R"({"prompt":"x","n":17})").param, "n");
  EXPECT_EQ(ParseError(R"({"prompt":"x","n":0})").param, "n");
}

TEST(OpenAiCodecTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ApiError e = ParseError(R"({"prompt":"x","user_data":)" + deep + "}");
  EXPECT_NE(e.status.message().find("deeper than 32"), std::string::npos) << e.status.message();
  // Brackets inside strings do not count; 31 levels inside the body object are fine.
  ParseOk(R"({"prompt":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[","x":)" + std::string(31, '[') +
          std::string(31, ']') + "}");
  ParseError(R"({"prompt":"x","x":)" + std::string(32, '[') + std::string(32, ']') + "}");
}

TEST(OpenAiCodecTest, TokenizeTakesTextOrMessages) {
  TokenizeRequest t;
  ApiError e;
  ASSERT_TRUE(ParseTokenizeRequest(R"({"model":"m","prompt":"hi","add_special_tokens":false})", &t, &e));
  EXPECT_EQ(t.model, "m");
  EXPECT_EQ(t.text, "hi");
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_TRUE(t.messages.empty());
  TokenizeRequest c;
  ASSERT_TRUE(ParseTokenizeRequest(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"add_generation_prompt":false})",
      &c, &e));
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].content, "u");
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_FALSE(ParseTokenizeRequest(R"({"messages":[{"role":"wizard","content":"x"}]})", &c, &e));
  EXPECT_EQ(e.param, "messages[0].role");
}

TEST(OpenAiCodecTest, NullMeansAbsent) {
  OpenAiRequest q = ParseOk(R"({"model":"m","prompt":"x","max_tokens":null,"stop":null,"temperature":null,
      "logprobs":null,"stream_options":null})");
  EXPECT_FALSE(q.max_tokens.has_value());
  EXPECT_TRUE(q.sampling.stop.empty());
  EXPECT_EQ(q.sampling.temperature, 1.0f);
  EXPECT_FALSE(q.logprobs);
}

TEST(OpenAiCodecTest, LogitBiasLogprobsStopArray) {
  OpenAiRequest q = ParseOk(R"({"model":"m","prompt":"x","logit_bias":{"5":-100,"7":2.5},"logprobs":3,
      "stop":["a","b"],"echo":true,"stop_token_ids":[4],"min_tokens":2})");
  ASSERT_EQ(q.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(q.sampling.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));
  EXPECT_EQ(q.sampling.logit_bias[1], (std::pair<int32_t, float>{7, 2.5f}));
  EXPECT_TRUE(q.logprobs);
  EXPECT_EQ(q.sampling.logprobs, 3);
  EXPECT_EQ(q.sampling.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(q.echo);
  EXPECT_EQ(q.sampling.stop_token_ids, std::vector<int32_t>{4});
  EXPECT_EQ(q.sampling.min_tokens, 2);
}

TEST(OpenAiCodecTest, ChatMessages) {
  OpenAiRequest q = ParseOk(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]},
      {"role":"assistant","content":null}],"max_completion_tokens":5,"max_tokens":9,"logprobs":true,
      "top_logprobs":2})", ApiKind::kChat);
  ASSERT_EQ(q.messages.size(), 3u);
  EXPECT_EQ(q.messages[0].role, "system");
  EXPECT_EQ(q.messages[1].content, "hi there");
  EXPECT_EQ(q.messages[2].content, "");
  EXPECT_EQ(q.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_TRUE(q.logprobs);
  EXPECT_EQ(q.sampling.logprobs, 2);

  OpenAiRequest plain = ParseOk(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true})",
                                ApiKind::kChat);
  EXPECT_EQ(plain.sampling.logprobs, 0);

  EXPECT_EQ(ParseError(R"({"model":"m","messages":"hi"})", ApiKind::kChat).param, "messages");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[]})", ApiKind::kChat).param, "messages");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[{"role":"function","content":"x"}]})", ApiKind::kChat).param,
            "messages[0].role");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                       ApiKind::kChat).param,
            "messages[0].content[0].type");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[{"role":"user","content":3}]})", ApiKind::kChat).param,
            "messages[0].content");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":2})",
                       ApiKind::kChat).param,
            "logprobs");
  EXPECT_EQ(ParseError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
                       ApiKind::kChat).param,
            "top_logprobs");
}

TEST(OpenAiCodecTest, BodyNotJsonObject) {
  EXPECT_EQ(ParseError("{not json").param, "");
  EXPECT_EQ(ParseError("[1,2]").param, "");
}

TEST(OpenAiCodecTest, TokenizeAndDetokenize) {
  TokenizeRequest t;
  ApiError e;
  ASSERT_TRUE(ParseTokenizeRequest(R"({"text":"hello","add_special_tokens":false})", &t, &e));
  EXPECT_EQ(t.text, "hello");
  EXPECT_FALSE(t.add_special_tokens);
  t = TokenizeRequest();
  ASSERT_TRUE(ParseTokenizeRequest(R"({"prompt":"p"})", &t, &e));
  EXPECT_EQ(t.text, "p");
  EXPECT_TRUE(t.add_special_tokens);
  EXPECT_FALSE(ParseTokenizeRequest(R"({"prompt":1})", &t, &e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_FALSE(ParseTokenizeRequest(R"({})", &t, &e));

  std::vector<int32_t> tokens;
  ASSERT_TRUE(ParseDetokenizeRequest(R"({"tokens":[1,2]})", &tokens, &e));
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":"12"})", &tokens, &e));
  EXPECT_EQ(e.param, "tokens");
}

}  // namespace openai_codec_test
}  // namespace kvserve
