// OpenAI response encoding: exact JSON of chunks, usage events, responses and errors.
#include "server/http/openai_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace openai_format_test {

using json = nlohmann::json;

json Event(const std::string& sse) {
  EXPECT_EQ(sse.rfind("data: ", 0), 0u) << sse;
  EXPECT_EQ(sse.substr(sse.size() - 2), "\n\n");
  return json::parse(sse.substr(6, sse.size() - 8));
}

class OpenAiFormatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::Stories(); }
  static void TearDownTestSuite() { model_.reset(); }
  const Tokenizer& tok() { return model_->tokenizer(); }
  static std::shared_ptr<const Model> model_;
};
std::shared_ptr<const Model> OpenAiFormatTest::model_;

ResponseMeta Meta(ApiKind kind) {
  ResponseMeta m;
  m.kind = kind;
  m.id = "cmpl-1";
  m.created = 1700000000;
  m.model = "stories";
  return m;
}

TEST_F(OpenAiFormatTest, CompletionChunk) {
  ChunkChoice c;
  c.index = 3;
  c.text = "Once";
  json j = Event(FormatChunkEvent(Meta(ApiKind::kCompletion), c, tok()));
  EXPECT_EQ(j, json::parse(R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",
      "choices":[{"index":3,"text":"Once","logprobs":null,"finish_reason":null}]})"));
  c.finish = FinishReason::kLength;
  ResponseMeta m = Meta(ApiKind::kCompletion);
  m.include_usage = true;
  j = Event(FormatChunkEvent(m, c, tok()));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j.contains("usage"));
  EXPECT_TRUE(j["usage"].is_null());
}

TEST_F(OpenAiFormatTest, ChatChunks) {
  ResponseMeta m = Meta(ApiKind::kChat);
  ChunkChoice first;
  first.first = true;
  EXPECT_EQ(Event(FormatChunkEvent(m, first, tok()))["choices"][0],
            json::parse(R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null})"));
  ChunkChoice text;
  text.text = "hi";
  json j = Event(FormatChunkEvent(m, text, tok()));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"], json::parse(R"({"content":"hi"})"));
  ChunkChoice end;
  end.finish = FinishReason::kStop;
  EXPECT_EQ(Event(FormatChunkEvent(m, end, tok()))["choices"][0],
            json::parse(R"({"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"})"));
}

TEST_F(OpenAiFormatTest, UsageEvent) {
  RequestUsage u;
  u.prompt_tokens = 5;
  u.completion_tokens = 7;
  u.cached_prompt_tokens = 2;
  json j = Event(FormatUsageEvent(Meta(ApiKind::kChat), u));
  EXPECT_EQ(j["choices"], json::array());
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,
      "prompt_tokens_details":{"cached_tokens":2}})"));
}

TEST_F(OpenAiFormatTest, ResponsesWithLogprobs) {
  const int32_t once = tok().Encode("Once", false).front();
  ChoiceResult c;
  c.index = 0;
  c.text = "ab Once";
  c.text_offset_base = 2;
  c.finish = FinishReason::kStop;
  c.logprobs.push_back({once, -0.5f, {{once, -0.5f}, {2, -1.0f}}});
  ResponseMeta m = Meta(ApiKind::kCompletion);
  m.logprobs = true;
  RequestUsage u;
  json j = json::parse(FormatResponse(m, std::span<const ChoiceResult>(&c, 1), u, tok()));
  const std::string piece = tok().TokenToPiece(once, true);
  EXPECT_EQ(j["choices"][0]["text"], "ab Once");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json::array({piece}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"], json::array({-0.5}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json::array({2}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0][piece], -0.5);
  EXPECT_EQ(j["usage"]["total_tokens"], 0);

  m.kind = ApiKind::kChat;
  j = json::parse(FormatResponse(m, std::span<const ChoiceResult>(&c, 1), u, tok()));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"ab Once"})"));
  const json& lp = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], piece);
  EXPECT_EQ(lp["logprob"], -0.5);
  EXPECT_EQ(lp["bytes"].size(), piece.size());
  EXPECT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][1]["token"], tok().TokenToPiece(2, true));
}

TEST_F(OpenAiFormatTest, Errors) {
  ApiError e{NotFoundError("no such model"), "model", "model_not_found", 0};
  EXPECT_EQ(json::parse(FormatErrorBody(e)), json::parse(R"({"error":{"message":"no such model",
      "type":"not_found_error","param":"model","code":"model_not_found"}})"));
  HttpReply r = ErrorReply(e);
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(r.headers.empty());

  HttpReply busy = ErrorReply(ApiError{ResourceExhaustedError("queue full"), "", "", 0});
  EXPECT_EQ(busy.status, 429);
  ASSERT_EQ(busy.headers.size(), 1u);
  EXPECT_EQ(busy.headers[0], (std::pair<std::string, std::string>{"Retry-After", "1"}));
  EXPECT_EQ(json::parse(busy.body)["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(json::parse(busy.body)["error"]["param"].is_null());

  HttpReply big = ErrorReply(ApiError{InvalidArgumentError("too big"), "", "", 413});
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(json::parse(big.body)["error"]["type"], "invalid_request_error");

  EXPECT_EQ(Event(FormatErrorEvent(e))["error"]["code"], "model_not_found");
}

}  // namespace openai_format_test
}  // namespace kvserve
