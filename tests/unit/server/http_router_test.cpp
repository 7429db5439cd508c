// HttpRouter + GenerationJob on a real engine (stories260K): routes, auth, readiness gates,
// error statuses, and the OpenAI responses and SSE streams the jobs produce.
#include "server/http/http_router.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace http_router_test {

using json = nlohmann::json;

class HttpRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::Stories();
    engine_ = testing::MakeEngine(model_, testing::TestConfig());
    ctx_.engine = engine_.get();
    ctx_.model_id = "stories";
    ctx_.loading = false;
  }
  void TearDown() override { engine_->Stop(); }

  HttpRouter::Result Call(HttpRouter& router, const std::string& method, const std::string& target,
                          const std::string& body = "", const std::string& auth = "",
                          const std::string& session_header = "") {
    HttpRequestInfo r;
    r.method = method;
    r.target = target;
    r.body = body;
    r.authorization = auth;
    r.session_id = session_header;
    return router.Handle(r);
  }

  // Runs a job to its end; returns (all SSE bytes or the reply body, status).
  std::pair<std::string, int> Run(GenerationJob& job, bool* started = nullptr) {
    std::string body;
    int status = 200;
    EXPECT_TRUE(testing::WaitFor([&] {
      GenerationJob::Output out = job.Poll();
      if (out.reply) {
        body = out.reply->body;
        status = out.reply->status;
      }
      if (out.start && started) *started = true;
      body += out.body;
      return out.finished;
    }, 60));
    return {body, status};
  }

  static std::vector<json> Events(const std::string& sse, bool* done) {
    std::vector<json> events;
    *done = false;
    size_t pos = 0;
    while (pos < sse.size()) {
      const size_t end = sse.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos);
      const std::string line = sse.substr(pos, end - pos);
      EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
      EXPECT_FALSE(*done) << "events after [DONE]";
      if (line == "data: [DONE]") {
        *done = true;
      } else {
        events.push_back(json::parse(line.substr(6)));
      }
      pos = end + 2;
    }
    return events;
  }

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  ServerContext ctx_;
};

TEST_F(HttpRouterTest, RoutesMethodsAndObservability) {
  HttpRouter router(&ctx_);
  HttpRouter::Result r = Call(router, "GET", "/nope");
  EXPECT_EQ(r.reply->status, 404);
  EXPECT_EQ(json::parse(r.reply->body)["error"]["code"], "unknown_url");

  r = Call(router, "GET", "/v1/completions");
  EXPECT_EQ(r.reply->status, 405);
  EXPECT_EQ(r.reply->headers.at(0), (std::pair<std::string, std::string>{"Allow", "POST"}));

  r = Call(router, "GET", "/v1/models?x=1");
  ASSERT_EQ(r.reply->status, 200);
  json models = json::parse(r.reply->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "stories");
  EXPECT_EQ(models["data"][0]["max_model_len"], 2048);
  EXPECT_EQ(Call(router, "GET", "/v1/models/stories").reply->status, 200);
  EXPECT_EQ(Call(router, "GET", "/v1/models/other").reply->status, 404);

  EXPECT_EQ(Call(router, "GET", "/health").reply->status, 200);
  EXPECT_EQ(Call(router, "GET", "/ready").reply->status, 200);
  r = Call(router, "GET", "/metrics");
  EXPECT_EQ(r.reply->status, 200);
  EXPECT_EQ(r.reply->content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_TRUE(r.quiet);
}

// POST bodies and the routes that wait for the engine thread go to the worker threads; the
// decision comes from the route table, so a near-miss path or a GET elsewhere stays on I/O.
TEST(HttpRouterRouting, HeavyRequestsAreThoseThatParseBodiesOrWaitForTheEngine) {
  auto heavy = [](const char* method, const char* target) {
    HttpRequestInfo r;
    r.method = method;
    r.target = target;
    return HttpRouter::IsHeavy(r);
  };
  EXPECT_TRUE(heavy("POST", "/v1/completions"));
  EXPECT_TRUE(heavy("GET", "/v1/cache/blocks"));
  EXPECT_TRUE(heavy("GET", "/v1/cache/blocks?compact=1"));
  EXPECT_TRUE(heavy("GET", "/debug/cache"));
  EXPECT_FALSE(heavy("GET", "/v1/cache/blocksX"));
  EXPECT_FALSE(heavy("GET", "/metrics"));
  EXPECT_FALSE(heavy("GET", "/"));
  EXPECT_FALSE(heavy("GET", "/health"));
}

TEST_F(HttpRouterTest, LoadingAndDraining) {
  HttpRouter router(&ctx_);
  ctx_.loading = true;
  EXPECT_EQ(Call(router, "GET", "/health").reply->status, 200);
  HttpRouter::Result r = Call(router, "GET", "/ready");
  EXPECT_EQ(r.reply->status, 503);
  EXPECT_EQ(json::parse(r.reply->body)["status"], "loading");
  EXPECT_EQ(Call(router, "GET", "/v1/models").reply->status, 503);
  EXPECT_EQ(Call(router, "GET", "/metrics").reply->status, 503);
  ctx_.loading = false;
  ctx_.draining = true;
  r = Call(router, "POST", "/v1/completions", R"({"model":"stories","prompt":"x"})");
  EXPECT_EQ(r.reply->status, 503);
  EXPECT_EQ(ctx_.requests_rejected.load(), 1);
  EXPECT_EQ(json::parse(r.reply->body)["error"]["type"], "service_unavailable_error");
  EXPECT_EQ(r.reply->headers.at(0).first, "Retry-After");
  EXPECT_EQ(json::parse(Call(router, "GET", "/ready").reply->body)["status"], "draining");
  EXPECT_EQ(Call(router, "GET", "/health").reply->status, 200);
  EXPECT_EQ(Call(router, "GET", "/metrics").reply->status, 200);
}

TEST_F(HttpRouterTest, ApiKeys) {
  ctx_.options.api_keys = {"sk-a", "sk-b"};
  {
    HttpRouter router(&ctx_);
    HttpRouter::Result r = Call(router, "GET", "/v1/models");
    EXPECT_EQ(r.reply->status, 401);
    EXPECT_EQ(json::parse(r.reply->body)["error"]["type"], "authentication_error");
    EXPECT_EQ(Call(router, "GET", "/v1/models", "", "Bearer sk-c").reply->status, 401);
    EXPECT_EQ(Call(router, "GET", "/v1/models", "", "Bearer sk-b").reply->status, 200);
    EXPECT_EQ(Call(router, "POST", "/v1/completions", "{}", "Bearer nope").reply->status, 401);
    EXPECT_EQ(ctx_.requests_rejected.load(), 0);  // auth failures are not rejections
    EXPECT_EQ(Call(router, "GET", "/health").reply->status, 200);
    EXPECT_EQ(Call(router, "GET", "/metrics").reply->status, 200);
  }
  ctx_.options.protect_observability = true;
  HttpRouter router(&ctx_);
  EXPECT_EQ(Call(router, "GET", "/health").reply->status, 401);
  EXPECT_EQ(Call(router, "GET", "/ready", "", "Bearer sk-a").reply->status, 200);
}

TEST_F(HttpRouterTest, RequestErrors) {
  HttpRouter router(&ctx_);
  HttpRouter::Result r = Call(router, "POST", "/v1/completions", R"({"model":"gpt-4","prompt":"x"})");
  EXPECT_EQ(r.reply->status, 404);
  EXPECT_EQ(json::parse(r.reply->body)["error"]["code"], "model_not_found");

  r = Call(router, "POST", "/v1/completions", R"({"model":"stories","prompt":"x","temperature":"hot"})");
  EXPECT_EQ(r.reply->status, 400);
  EXPECT_EQ(json::parse(r.reply->body)["error"]["param"], "temperature");

  // Beyond the context: the engine's OUT_OF_RANGE is a 400.
  std::vector<int32_t> long_prompt(2100, 5);
  r = Call(router, "POST", "/v1/completions", json{{"model", "stories"}, {"prompt", long_prompt}}.dump());
  EXPECT_EQ(r.reply->status, 400);
  EXPECT_EQ(json::parse(r.reply->body)["error"]["code"], "context_length_exceeded");

  // Range errors come from SamplingParams::Validate through Submit.
  r = Call(router, "POST", "/v1/completions", R"({"model":"stories","prompt":"x","top_p":5})");
  EXPECT_EQ(r.reply->status, 400);
  r = Call(router, "POST", "/v1/completions", R"({"model":"stories","prompt":[9999]})");
  EXPECT_EQ(r.reply->status, 400);
  // Every refusal above counts as a rejected request (kvserve_requests_total{status="rejected"}).
  EXPECT_EQ(ctx_.requests_rejected.load(), 5);
}

TEST_F(HttpRouterTest, TokenizeDetokenize) {
  HttpRouter router(&ctx_);
  HttpRouter::Result r = Call(router, "POST", "/tokenize", R"({"prompt":"Once upon a time"})");
  ASSERT_EQ(r.reply->status, 200);
  json t = json::parse(r.reply->body);
  const std::vector<int32_t> expected = model_->tokenizer().Encode("Once upon a time", true);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), expected);
  EXPECT_EQ(t["count"], expected.size());
  r = Call(router, "POST", "/detokenize", json{{"tokens", expected}}.dump());
  ASSERT_EQ(r.reply->status, 200);
  EXPECT_EQ(json::parse(r.reply->body)["prompt"], "Once upon a time");
  EXPECT_EQ(Call(router, "POST", "/detokenize", R"({"tokens":[100000]})").reply->status, 400);
}

TEST_F(HttpRouterTest, StreamEqualsNonStream) {
  HttpRouter router(&ctx_);
  const std::string base = R"("model":"stories","prompt":"Once upon a time","max_tokens":24,"temperature":0)";
  HttpRouter::Result r = Call(router, "POST", "/v1/completions", "{" + base + "}");
  ASSERT_TRUE(r.job);
  auto [body, status] = Run(*r.job);
  ASSERT_EQ(status, 200);
  json full = json::parse(body);
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["usage"]["completion_tokens"], 24);
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  const std::string text = full["choices"][0]["text"];
  EXPECT_FALSE(text.empty());

  r = Call(router, "POST", "/v1/completions",
           "{" + base + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.job);
  bool started = false;
  auto [sse, sstatus] = Run(*r.job, &started);
  EXPECT_TRUE(started);
  bool done = false;
  std::vector<json> events = Events(sse, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string streamed;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_TRUE(events[i]["usage"].is_null());
    streamed += events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["choices"], json::array());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 24);
}

TEST_F(HttpRouterTest, ChatStreamShape) {
  HttpRouter router(&ctx_);
  HttpRouter::Result r = Call(router, "POST", "/v1/chat/completions",
                              R"({"model":"stories","messages":[{"role":"user","content":"Hi"}],"max_tokens":5,
                                  "temperature":0,"stream":true,"ignore_eos":true})");
  ASSERT_TRUE(r.job);
  EXPECT_EQ(r.id.rfind("chatcmpl-", 0), 0u);
  bool done = false;
  std::vector<json> events = Events(Run(*r.job).first, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front()["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(events.back()["choices"][0]["delta"], json::object());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(events.back().contains("usage"));
}

TEST_F(HttpRouterTest, BatchOrderAndEcho) {
  HttpRouter router(&ctx_);
  HttpRouter::Result r = Call(router, "POST", "/v1/completions",
                              R"({"model":"stories","prompt":["Once","Lily"],"n":2,"max_tokens":6,"temperature":0,
                                  "echo":true,"logprobs":2})");
  ASSERT_TRUE(r.job);
  json j = json::parse(Run(*r.job).first);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    const std::string text = j["choices"][i]["text"];
    EXPECT_EQ(text.rfind(i < 2 ? "Once" : "Lily", 0), 0u) << text;
    // echo + logprobs: the prompt's tokens (BOS, the word) come first, then the 6 generated.
    const json& lp = j["choices"][i]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 8u);
    EXPECT_EQ(lp["tokens"][0], "<s>");
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_LT(lp["token_logprobs"][1].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][1].size(), 2u);
    EXPECT_EQ(lp["top_logprobs"][2].size(), 2u);
    EXPECT_EQ(lp["text_offset"][0], 0);
    EXPECT_EQ(lp["text_offset"][1], 3);  // after "<s>"
  }
  EXPECT_EQ(j["choices"][0]["text"], j["choices"][1]["text"]);  // greedy choices agree
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
}

TEST_F(HttpRouterTest, EngineErrorBeforeTheStreamIsAStatus) {
  HttpRouter router(&ctx_);
  // A session is busy while its first request runs: the second fails at admission.
  HttpRouter::Result first = Call(router, "POST", "/v1/completions",
                                  R"({"model":"stories","prompt":"Once","max_tokens":1500,"ignore_eos":true,
                                      "session_id":"s1","stream":true})");
  ASSERT_TRUE(first.job);
  HttpRouter::Result second = Call(router, "POST", "/v1/completions",
                                   R"({"model":"stories","prompt":"Once","max_tokens":5,"session_id":"s1",
                                       "stream":true})");
  ASSERT_TRUE(second.job);
  bool started = false;
  auto [body, status] = Run(*second.job, &started);
  EXPECT_FALSE(started);
  EXPECT_EQ(status, 409);
  EXPECT_EQ(json::parse(body)["error"]["type"], "invalid_request_error");
  first.job->Abort();
  Run(*first.job);
}

TEST_F(HttpRouterTest, SessionHeaderNamesTheSessionAndMustAgreeWithTheBody) {
  HttpRouter router(&ctx_);
  // The header alone attaches to the session the body named: busy while the first request runs.
  HttpRouter::Result first = Call(router, "POST", "/v1/completions",
                                  R"({"model":"stories","prompt":"Once","max_tokens":1500,"ignore_eos":true,
                                      "session_id":"h1","stream":true})");
  ASSERT_TRUE(first.job);
  HttpRouter::Result by_header = Call(router, "POST", "/v1/completions",
                                      R"({"model":"stories","prompt":"Once","max_tokens":5})", "", "h1");
  ASSERT_TRUE(by_header.job);
  EXPECT_EQ(Run(*by_header.job).second, 409);
  // Body and header naming different sessions: 400 on session_id, before the engine.
  HttpRouter::Result conflict = Call(router, "POST", "/v1/completions",
                                     R"({"model":"stories","prompt":"Once","session_id":"a"})", "", "b");
  ASSERT_TRUE(conflict.reply);
  EXPECT_EQ(conflict.reply->status, 400);
  EXPECT_EQ(json::parse(conflict.reply->body)["error"]["param"], "session_id");
  // The same id in both is fine.
  HttpRouter::Result same = Call(router, "POST", "/v1/completions",
                                 R"({"model":"stories","prompt":"Once","max_tokens":2,"session_id":"h2"})", "", "h2");
  ASSERT_TRUE(same.job);
  EXPECT_EQ(Run(*same.job).second, 200);
  first.job->Abort();
  Run(*first.job);
}

TEST_F(HttpRouterTest, DeleteSessionEndsTheCallersSessionOnly) {
  ctx_.options.api_keys = {"sk-a", "sk-b"};
  HttpRouter router(&ctx_);
  HttpRouter::Result turn = Call(router, "POST", "/v1/completions",
                                 R"({"model":"stories","prompt":"Once","max_tokens":4,"session_id":"mine"})",
                                 "Bearer sk-a");
  ASSERT_TRUE(turn.job);
  ASSERT_EQ(Run(*turn.job).second, 200);
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().chat_sessions == 1; }));
  // Another key has no session of that name: 404, and the session stays.
  HttpRouter::Result other = Call(router, "DELETE", "/v1/sessions/mine", "", "Bearer sk-b");
  ASSERT_TRUE(other.reply);
  EXPECT_EQ(other.reply->status, 404);
  EXPECT_EQ(json::parse(other.reply->body)["error"]["code"], "session_not_found");
  EXPECT_EQ(engine_->GetStats().chat_sessions, 1);
  HttpRouter::Result mine = Call(router, "DELETE", "/v1/sessions/mine", "", "Bearer sk-a");
  ASSERT_TRUE(mine.reply);
  EXPECT_EQ(mine.reply->status, 200);
  EXPECT_EQ(mine.route, "/v1/sessions/{id}");
  const json body = json::parse(mine.reply->body);
  EXPECT_EQ(body["id"], "mine");
  EXPECT_EQ(body["deleted"], true);
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().chat_sessions == 0; }));
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().cache.used_blocks == 0; }));
  EXPECT_EQ(Call(router, "DELETE", "/v1/sessions/mine", "", "Bearer sk-a").reply->status, 404);
  EXPECT_EQ(Call(router, "GET", "/v1/sessions/mine", "", "Bearer sk-a").reply->status, 405);
}

// Issue 54, D15: the id in DELETE /v1/sessions/{id} is percent-decoded, as clients encode it
// (encodeURIComponent, urllib.parse.quote): ids with a space, '?', '#', '%' or non-ASCII end.
TEST_F(HttpRouterTest, DeleteSessionDecodesItsPercentEscapes) {
  HttpRouter router(&ctx_);
  const std::string id = "a b?#%\xC3\xA9/x";
  HttpRouter::Result turn = Call(router, "POST", "/v1/completions",
                                 json{{"model", "stories"}, {"prompt", "Once"}, {"max_tokens", 2}, {"session_id", id}}.dump());
  ASSERT_TRUE(turn.job);
  ASSERT_EQ(Run(*turn.job).second, 200);
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().chat_sessions == 1; }));
  EXPECT_EQ(Call(router, "DELETE", "/v1/sessions/a%2").reply->status, 400);
  EXPECT_EQ(Call(router, "DELETE", "/v1/sessions/a%zzb").reply->status, 400);
  HttpRouter::Result ended = Call(router, "DELETE", "/v1/sessions/a%20b%3F%23%25%c3%A9%2Fx");
  ASSERT_TRUE(ended.reply);
  EXPECT_EQ(ended.reply->status, 200) << ended.reply->body;
  EXPECT_EQ(json::parse(ended.reply->body)["id"], id);
  EXPECT_TRUE(testing::WaitFor([&] { return engine_->GetStats().chat_sessions == 0; }));
}

TEST_F(HttpRouterTest, PriorityIsTheOperatorsChoice) {
  const std::string body = R"({"model":"stories","prompt":"Once","max_tokens":2,"priority":-100})";
  {
    HttpRouter router(&ctx_);
    HttpRouter::Result refused = Call(router, "POST", "/v1/completions", body);
    ASSERT_TRUE(refused.reply);
    EXPECT_EQ(refused.reply->status, 400);
    EXPECT_EQ(json::parse(refused.reply->body)["error"]["param"], "priority");
    // Priority 0 is every request's default, always accepted.
    HttpRouter::Result zero = Call(router, "POST", "/v1/completions",
                                   R"({"model":"stories","prompt":"Once","max_tokens":2,"priority":0})");
    ASSERT_TRUE(zero.job);
    EXPECT_EQ(Run(*zero.job).second, 200);
  }
  ctx_.options.allow_client_priority = true;
  HttpRouter router(&ctx_);
  HttpRouter::Result allowed = Call(router, "POST", "/v1/completions", body);
  ASSERT_TRUE(allowed.job);
  EXPECT_EQ(Run(*allowed.job).second, 200);
}

}  // namespace http_router_test
}  // namespace kvserve
