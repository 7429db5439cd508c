// The Responses API through HttpRouter on a real engine (stories260K): the response object,
// the stream's events in order, a chain of previous_response_id that prefills only its new
// input, stored responses per API key (GET, input_items, DELETE), and its errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/http/http_router.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace responses_test {

using json = nlohmann::json;

class ResponsesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE("models/stories260K.gguf");
    model_ = testing::Stories();
    engine_ = testing::MakeEngine(model_, testing::TestConfig());
    ctx_.engine = engine_.get();
    ctx_.model_id = "stories";
    ctx_.loading = false;
    ctx_.options.api_keys = {"sk-a", "sk-b"};
    router_ = std::make_unique<HttpRouter>(&ctx_);
  }
  void TearDown() override {
    if (engine_) engine_->Stop();
  }

  HttpRouter::Result Call(const std::string& method, const std::string& target, const std::string& body = "",
                          const std::string& key = "sk-a") {
    HttpRequestInfo r;
    r.method = method;
    r.target = target;
    r.body = body;
    r.authorization = "Bearer " + key;
    return router_->Handle(r);
  }

  // The reply (status, body) of a call, running its job to the end.
  std::pair<int, std::string> Reply(HttpRouter::Result r) {
    if (r.reply) return {r.reply->status, r.reply->body};
    EXPECT_TRUE(r.job);
    if (!r.job) return {0, ""};
    std::string body;
    int status = 200;
    EXPECT_TRUE(testing::WaitFor([&] {
      GenerationJob::Output out = r.job->Poll();
      if (out.reply) {
        body = out.reply->body;
        status = out.reply->status;
      }
      body += out.body;
      return out.finished;
    }, 60));
    return {status, body};
  }

  json Create(const json& request, const std::string& key = "sk-a") {
    auto [status, body] = Reply(Call("POST", "/v1/responses", request.dump(), key));
    EXPECT_EQ(status, 200) << body;
    return json::parse(body, nullptr, false);
  }

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  ServerContext ctx_;
  std::unique_ptr<HttpRouter> router_;
};

TEST_F(ResponsesTest, ACreatedResponseHasOpenAisShape) {
  const json r = Create({{"model", "stories"}, {"input", "Once upon a time"}, {"max_output_tokens", 12},
                         {"temperature", 0}, {"instructions", "Tell stories."}});
  EXPECT_EQ(r["object"], "response");
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(r["status"], "incomplete");  // cut by max_output_tokens
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["instructions"], "Tell stories.");
  ASSERT_EQ(r["output"].size(), 1u);
  const json& message = r["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_FALSE(message["content"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(r["usage"]["output_tokens"], 12);
  EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["input_tokens"].get<int>() + 12);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ResponsesTest, TheStreamSendsTheDocumentedEventsAndTheSameText) {
  const json request = {{"input", "Lily liked to"}, {"max_output_tokens", 16}, {"temperature", 0}, {"store", false}};
  const json full = Create(request);
  json streamed = request;
  streamed["stream"] = true;
  auto [status, sse] = Reply(Call("POST", "/v1/responses", streamed.dump()));
  ASSERT_EQ(status, 200) << sse;
  std::vector<std::string> types;
  std::string text;
  int sequence = 0;
  json last;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string event = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t data = event.find("\ndata: ");
    ASSERT_TRUE(event.starts_with("event: ") && data != std::string::npos) << event;
    const json j = json::parse(event.substr(data + 7));
    EXPECT_EQ(j["type"], event.substr(7, data - 7));
    EXPECT_EQ(j["sequence_number"], sequence++);
    types.push_back(j["type"].get<std::string>());
    if (j["type"] == "response.output_text.delta") text += j["delta"].get<std::string>();
    last = j;
  }
  ASSERT_GE(types.size(), 9u);
  const std::vector<std::string> head = {"response.created", "response.in_progress", "response.output_item.added",
                                         "response.content_part.added", "response.output_text.delta"};
  EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + 5), head);
  const std::vector<std::string> tail = {"response.output_text.done", "response.content_part.done",
                                         "response.output_item.done", "response.incomplete"};
  EXPECT_EQ(std::vector<std::string>(types.end() - 4, types.end()), tail);
  EXPECT_EQ(text, full["output"][0]["content"][0]["text"]);
  EXPECT_EQ(last["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(last["response"]["usage"]["output_tokens"], 16);
}

TEST_F(ResponsesTest, AChainPrefillsOnlyItsNewInput) {
  const json r1 = Create({{"input", "Tell me a story about a cat."}, {"max_output_tokens", 20}, {"temperature", 0}});
  const json r2 = Create({{"input", "What happened next?"}, {"previous_response_id", r1["id"]},
                          {"max_output_tokens", 20}, {"temperature", 0}});
  EXPECT_EQ(r2["previous_response_id"], r1["id"]);
  // Everything of the first turn but its last sampled token (never computed) is reused.
  const int before = r1["usage"]["input_tokens"].get<int>() + r1["usage"]["output_tokens"].get<int>();
  EXPECT_GE(r2["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), before - 2) << r2["usage"].dump();
  const json r3 = Create({{"input", "And the end?"}, {"previous_response_id", r2["id"]}, {"max_output_tokens", 8}});
  const int before3 = r2["usage"]["input_tokens"].get<int>() + r2["usage"]["output_tokens"].get<int>();
  EXPECT_GE(r3["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), before3 - 2) << r3["usage"].dump();

  // Stored: the same object, its input items, then deleted.
  auto [status, body] = Reply(Call("GET", "/v1/responses/" + r2["id"].get<std::string>()));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(json::parse(body), r2);
  auto [items_status, items_body] = Reply(Call("GET", "/v1/responses/" + r2["id"].get<std::string>() + "/input_items"));
  EXPECT_EQ(items_status, 200);
  const json items = json::parse(items_body);
  EXPECT_EQ(items["object"], "list");
  ASSERT_EQ(items["data"].size(), 1u);
  EXPECT_EQ(items["data"][0]["content"][0]["text"], "What happened next?");
  // Another key sees nothing of it.
  EXPECT_EQ(Reply(Call("GET", "/v1/responses/" + r2["id"].get<std::string>(), "", "sk-b")).first, 404);
  auto [continued_status, continued] = Reply(Call(
      "POST", "/v1/responses", json{{"input", "Hi"}, {"previous_response_id", r2["id"]}}.dump(), "sk-b"));
  EXPECT_EQ(continued_status, 404);
  EXPECT_EQ(json::parse(continued)["error"]["param"], "previous_response_id");
  // Deleting a response ends its chain's chat session: the conversation's KV cache goes
  // with it (issue 54, D7), and its blocks are free.
  EXPECT_EQ(engine_->GetStats().chat_sessions, 1);
  auto [deleted_status, deleted] = Reply(Call("DELETE", "/v1/responses/" + r1["id"].get<std::string>()));
  EXPECT_EQ(deleted_status, 200);
  EXPECT_EQ(json::parse(deleted)["deleted"], true);
  EXPECT_EQ(Reply(Call("GET", "/v1/responses/" + r1["id"].get<std::string>())).first, 404);
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().chat_sessions == 0; }));
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().cache.used_blocks == 0; }));
  // The rest of the chain is the client's to delete; continuing it after r1 is gone cannot
  // rebuild the conversation: 404, as for any response that is not there.
  EXPECT_EQ(Reply(Call("GET", "/v1/responses/" + r3["id"].get<std::string>())).first, 200);
  EXPECT_EQ(Reply(Call("POST", "/v1/responses", json{{"input", "Hi"}, {"previous_response_id", r3["id"]}}.dump())).first,
            404);
}

// Two continuations of one response at once (a client forking a conversation): both answer;
// the one that finds the chain's session busy runs on its own instead of getting 409.
TEST_F(ResponsesTest, TwoContinuationsOfOneResponseAtOnceBothAnswer) {
  const json r1 = Create({{"input", "Tell me a story about a cat."}, {"max_output_tokens", 16}});
  const json next = {{"input", "What happened next?"}, {"previous_response_id", r1["id"]}, {"max_output_tokens", 64}};
  HttpRouter::Result a = Call("POST", "/v1/responses", next.dump());
  HttpRouter::Result b = Call("POST", "/v1/responses", next.dump());
  auto [status_a, body_a] = Reply(std::move(a));
  auto [status_b, body_b] = Reply(std::move(b));
  EXPECT_EQ(status_a, 200) << body_a;
  EXPECT_EQ(status_b, 200) << body_b;
  for (const std::string& body : {body_a, body_b}) {
    EXPECT_EQ(json::parse(body)["usage"]["output_tokens"], 64) << body;  // max_output_tokens: "incomplete"
  }
}

TEST_F(ResponsesTest, BadRequestsNameTheirField) {
  const auto param = [&](const json& request) {
    auto [status, body] = Reply(Call("POST", "/v1/responses", request.dump()));
    EXPECT_EQ(status, 400) << body;
    return json::parse(body)["error"]["param"];
  };
  EXPECT_EQ(param(json::object()), "input");
  EXPECT_EQ(param({{"input", 3}}), "input");
  EXPECT_EQ(param({{"input", json::array({{{"type", "function_call_output"}, {"output", "x"}}})}}), "input[0].type");
  EXPECT_EQ(param({{"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}}})}}})}}),
            "input[0].content[0].type");
  EXPECT_EQ(param({{"input", "x"}, {"max_output_tokens", 0}}), "max_output_tokens");
  EXPECT_EQ(param({{"input", "x"}, {"tools", json::array({{{"type", "function"}}})}}), "tools");
  EXPECT_EQ(param({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}}), "text.format");
  // Structured outputs: a schema the engine cannot enforce names text.format; one it can is
  // followed (a boolean, whatever the random-ish model prefers).
  EXPECT_EQ(param(json::parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "b",
                                 "schema": {"not": {"enum": [1]}}}}})")), "text.format");
  auto [status, body] = Reply(Call("POST", "/v1/responses", R"({"input": "Is it?", "max_output_tokens": 200,
      "text": {"format": {"type": "json_schema", "name": "b", "strict": true, "schema": {"type": "boolean"}}}})"));
  ASSERT_EQ(status, 200) << body;
  const json done = json::parse(body);
  ASSERT_EQ(done["status"], "completed") << body;
  const json value = json::parse(done["output"][0]["content"][0]["text"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(value.is_boolean()) << body;
  EXPECT_EQ(Reply(Call("POST", "/v1/responses", json{{"input", "x"}, {"previous_response_id", "resp_none"}}.dump()))
                .first,
            404);
}

}  // namespace responses_test
}  // namespace kvserve
