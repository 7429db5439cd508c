// Both front ends over one engine, through the one RequestBuilder: the tenant's prefix-cache
// domain is the same on HTTP and gRPC and no other key reaches it; gRPC decodes requests
// itself (INVALID_ARGUMENT for invalid UTF-8) and sends one delta per choice per message;
// "model" may be left out on both; the queue depth survives every refusal path and /ready
// follows it; the HTTP I/O threads keep answering while a request body is being handled.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <future>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "generation.grpc.pb.h"
#include "server/api/auth.h"
#include "server/http/http_server.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/grpc_convert.h"
#include "server/http/http_router.h"
#include "server/api/request_builder.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace front_ends_test {

using json = nlohmann::json;
using ::kvserve::testing::WaitFor;

class FrontEndsTest : public ::testing::Test {
 protected:
  void Start(EngineConfig config, std::vector<std::string> keys = {}) {
    model_ = ::kvserve::testing::LoadModel(::kvserve::testing::SharedFileExists("models/stories260K.gguf")
                                               ? ::kvserve::testing::SharedPath("models/stories260K.gguf")
                                               : "synthetic:tiny");
    ASSERT_NE(model_, nullptr);
    engine_ = ::kvserve::testing::MakeEngine(model_, config);
    ctx_.engine = engine_.get();
    ctx_.model_id = "m";
    ctx_.backend_name = "cpu";
    ctx_.options.host = "127.0.0.1";
    ctx_.options.grpc_port = 0;
    ctx_.options.http_port = 0;
    ctx_.options.http_threads = 1;
    ctx_.options.api_keys = keys;
    ctx_.options.chat_template = chat_template_;
    ctx_.loading = false;
    router_ = std::make_unique<HttpRouter>(&ctx_);
    auto grpc_server = GrpcServer::Start(&ctx_);
    ASSERT_TRUE(grpc_server.ok()) << grpc_server.status().ToString();
    grpc_ = std::move(grpc_server).value();
    channel_ = grpc::CreateChannel(fmt::format("127.0.0.1:{}", grpc_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }
  void TearDown() override {
    if (http_) http_->Stop();
    if (grpc_) grpc_->Shutdown(0);
    if (engine_) engine_->Stop();
  }

  // POST/GET through the router; returns (status, body) once the job (if any) finished.
  std::pair<int, json> Http(const std::string& method, const std::string& target, const json& body = {},
                            const std::string& key = "") {
    HttpRequestInfo r;
    r.method = method;
    r.target = target;
    r.body = body.is_null() ? "" : body.dump();
    if (!key.empty()) r.authorization = "Bearer " + key;
    HttpRouter::Result result = router_->Handle(r);
    std::string text;
    int status = 200;
    if (result.reply) {
      text = result.reply->body;
      status = result.reply->status;
    } else {
      EXPECT_TRUE(WaitFor([&] {
        GenerationJob::Output out = result.job->Poll();
        if (out.reply) {
          text = out.reply->body;
          status = out.reply->status;
        }
        return out.finished;
      }, 60));
    }
    return {status, json::parse(text, nullptr, false)};
  }

  // A streaming request through the router: the SSE bytes, once the job finished.
  std::string Stream(const std::string& target, json body) {
    body["stream"] = true;
    HttpRequestInfo r;
    r.method = "POST";
    r.target = target;
    r.body = body.dump();
    HttpRouter::Result result = router_->Handle(r);
    std::string sse;
    EXPECT_TRUE(result.job);
    if (!result.job) return sse;
    EXPECT_TRUE(WaitFor([&] {
      GenerationJob::Output out = result.job->Poll();
      sse += out.body;
      return out.finished;
    }, 60));
    return sse;
  }

  // The JSON of each `data:` line of an SSE stream.
  static std::vector<json> Events(const std::string& sse) {
    std::vector<json> events;
    for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
      json event = json::parse(sse.substr(at + 6, sse.find('\n', at) - at - 6), nullptr, false);
      if (event.is_object()) events.push_back(std::move(event));
    }
    return events;
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& key = "", double seconds = 60) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
    if (!key.empty()) c->AddMetadata("authorization", "Bearer " + key);
    return c;
  }

  static v1::GenerateRequest GrpcGreedy(const std::string& prompt, int max_tokens) {
    v1::GenerateRequest r;
    r.set_prompt(prompt);
    r.mutable_sampling()->set_temperature(0);
    r.mutable_sampling()->set_max_tokens(max_tokens);
    r.mutable_sampling()->set_ignore_eos(true);
    return r;
  }

  std::string chat_template_;  // --chat-template (set before Start)
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  ServerContext ctx_;
  std::unique_ptr<HttpRouter> router_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

// A prompt of several full KV blocks (block size 16).
const std::string kLongPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog "
    "Max. One day, Lily and Max went to the park to look for a big red ball.";

TEST(RequestBuilderTest, TenantSaltsAreUnambiguous) {
  // No client-chosen salt reaches another tenant's domain.
  EXPECT_NE(RequestBuilder::TenantCacheSalt("key-a", "x"), RequestBuilder::TenantCacheSalt("key-b", "x"));
  EXPECT_NE(RequestBuilder::TenantCacheSalt("key-a", "b/x"), RequestBuilder::TenantCacheSalt("key-a/b", "x"));
  EXPECT_NE(RequestBuilder::TenantCacheSalt("key-b", RequestBuilder::TenantCacheSalt("key-a", "")),
            RequestBuilder::TenantCacheSalt("key-a", ""));
  EXPECT_EQ(RequestBuilder::TenantCacheSalt("", "s"), "s");  // no authentication: one tenant
}

TEST_F(FrontEndsTest, TenantsNeverShareCachedPrefixesOverEitherFrontEnd) {
  Start(::kvserve::testing::TestConfig(), {"sk-one", "sk-two"});
  const std::string one_tenant = *ApiKeyAuth({"sk-one", "sk-two"}).Authenticate("Bearer sk-one");
  auto grpc_cached = [&](const std::string& key, const std::string& salt) {
    v1::GenerateRequest r = GrpcGreedy(kLongPrompt, 2);
    r.mutable_options()->set_cache_salt(salt);
    v1::GenerateResponse response;
    const grpc::Status status = stub_->Generate(Context(key).get(), r, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.usage().cached_prompt_tokens();
  };
  auto http_cached = [&](const std::string& key, const std::string& salt) {
    auto [status, body] = Http("POST", "/v1/completions",
                               {{"prompt", kLongPrompt}, {"max_tokens", 2}, {"cache_salt", salt}}, key);
    EXPECT_EQ(status, 200) << body.dump();
    return body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(grpc_cached("sk-one", ""), 0);
  EXPECT_GE(grpc_cached("sk-one", ""), 32);  // its own prefix, over gRPC
  EXPECT_GE(http_cached("sk-one", ""), 32);  // the same domain over HTTP
  // Another key sees nothing of it, on either front end, whatever salt it picks.
  EXPECT_EQ(grpc_cached("sk-two", ""), 0);
  EXPECT_EQ(http_cached("sk-two", "x"), 0);
  EXPECT_EQ(grpc_cached("sk-two", RequestBuilder::TenantCacheSalt(one_tenant, "")), 0);
  EXPECT_EQ(grpc_cached("sk-two", one_tenant + "/"), 0);
}

TEST_F(FrontEndsTest, GrpcDecodesRequestsItselfAndNamesWhatIsWrong) {
  Start(::kvserve::testing::TestConfig());
  grpc::GenericStub generic(channel_);
  auto call = [&](const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  };
  // GenerateRequest{prompt: bytes FF FE}: proto3 strings must be UTF-8.
  grpc::Status s = call("/kvserve.v1.Generation/Generate", std::string("\x0a\x02\xff\xfe", 4));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("UTF-8"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("kvserve.v1.GenerateRequest"), std::string::npos) << s.error_message();
  EXPECT_EQ(call("/kvserve.v1.Generation/Tokenize", std::string("\x0a\x02\xc3\x28", 4)).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // And well-formed bytes still work through the raw methods.
  v1::GenerateRequest good = GrpcGreedy("Once", 3);
  EXPECT_TRUE(call("/kvserve.v1.Generation/Generate", good.SerializeAsString()).ok());
}

TEST(GrpcConvertTest, AMessageCarriesOneDeltaPerChoice) {
  // Deltas that queued up while a write was in flight go out in one message, merged.
  std::vector<StreamDelta> deltas(4);
  deltas[0].index = 0;
  deltas[0].text = "Once";
  deltas[0].token_ids = {10};
  deltas[1].index = 1;
  deltas[1].text = "Lily";
  deltas[1].token_ids = {20};
  deltas[2].index = 0;
  deltas[2].text = " upon";
  deltas[2].token_ids = {11};
  deltas[2].logprobs = {{11, -0.5f, {}}};
  deltas[3].index = 0;
  deltas[3].finish_reason = FinishReason::kLength;
  v1::GenerateStreamResponse m;
  AppendDeltas(deltas, &m);
  ASSERT_EQ(m.choices_size(), 2);
  EXPECT_EQ(m.choices(0).index(), 0);
  EXPECT_EQ(m.choices(0).text(), "Once upon");
  EXPECT_EQ(std::vector<int32_t>(m.choices(0).token_ids().begin(), m.choices(0).token_ids().end()),
            (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(m.choices(0).logprobs_size(), 1);
  EXPECT_EQ(m.choices(0).finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(m.choices(1).text(), "Lily");
  EXPECT_EQ(m.choices(1).finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
}

TEST_F(FrontEndsTest, ModelMayBeOmittedAndAnotherIsNotFound) {
  Start(::kvserve::testing::TestConfig());
  EXPECT_EQ(Http("POST", "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}).first, 200);
  EXPECT_EQ(Http("POST", "/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}).first, 200);
  auto [status, body] = Http("POST", "/v1/completions", {{"model", "gpt-4"}, {"prompt", "Once"}});
  EXPECT_EQ(status, 404);
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  v1::GenerateResponse response;
  EXPECT_TRUE(stub_->Generate(Context().get(), GrpcGreedy("Once", 2), &response).ok());
  v1::GenerateRequest other = GrpcGreedy("Once", 2);
  other.mutable_options()->set_model("gpt-4");
  EXPECT_EQ(stub_->Generate(Context().get(), other, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(FrontEndsTest, EchoWithLogprobsScoresEveryPromptToken) {
  Start(::kvserve::testing::TestConfig());
  const std::vector<int32_t> prompt = model_->tokenizer().Encode(kLongPrompt, true);
  // lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs, no new tokens.
  auto [status, body] = Http("POST", "/v1/completions",
                             {{"prompt", prompt}, {"echo", true}, {"logprobs", 3}, {"max_tokens", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  const json& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size());
  EXPECT_EQ(body["choices"][0]["text"], model_->tokenizer().Decode(prompt));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  // Reference: each prompt position decoded on its own, the scored token forced with a +100
  // bias (logprobs are reported from the raw logits, before the bias).
  for (size_t i = 1; i < prompt.size(); i += 7) {
    std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + static_cast<long>(i));
    auto [s, ref] = Http("POST", "/v1/completions",
                         {{"prompt", prefix}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 0},
                          {"logit_bias", {{std::to_string(prompt[i]), 100}}}});
    ASSERT_EQ(s, 200) << ref.dump();
    ASSERT_EQ(ref["choices"][0]["logprobs"]["tokens"].size(), 1u);
    const double expected = ref["choices"][0]["logprobs"]["token_logprobs"][0];
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), expected, 1e-4) << "position " << i;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
  }
  // With generated tokens and n = 2: each choice starts with the prompt's entries.
  auto [s2, gen] = Http("POST", "/v1/completions",
                        {{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 3}, {"n", 2},
                         {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(s2, 200) << gen.dump();
  for (int c = 0; c < 2; ++c) {
    const json& g = gen["choices"][c]["logprobs"]["token_logprobs"];
    ASSERT_EQ(g.size(), prompt.size() + 3);
    EXPECT_NEAR(g[prompt.size() - 1].get<double>(), lp["token_logprobs"][prompt.size() - 1].get<double>(), 1e-4);
  }
}

TEST_F(FrontEndsTest, TokenizeTakesMessagesAsChatRendersThem) {
  Start(::kvserve::testing::TestConfig());
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  auto [status, tokens] = Http("POST", "/tokenize", {{"messages", messages}});
  ASSERT_EQ(status, 200) << tokens.dump();
  auto [s, chat] = Http("POST", "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  ASSERT_EQ(s, 200);
  EXPECT_EQ(tokens["count"], chat["usage"]["prompt_tokens"]);
  RequestBuilder builder(&ctx_);
  StatusOr<RenderedPrompt> rendered = builder.RenderChat({{"system", "Be brief."}, {"user", "Hi"}}, true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(tokens["tokens"].get<std::vector<int32_t>>(), rendered->tokens);
  EXPECT_EQ(Http("POST", "/tokenize", {{"messages", json::array()}}).first, 400);
}

TEST_F(FrontEndsTest, QueueDepthSurvivesEveryRefusalAndReadyFollowsIt) {
  EngineConfig config = ::kvserve::testing::TestConfig();
  config.max_queued_requests = 2;
  Start(config);
  // Finished at admission (the server used to answer 429 for good after two of these).
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Http("POST", "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 0}}).first, 200) << i;
  }
  // A batch refused part-way (its second prompt does not fit the context): the first is
  // aborted again.
  const std::string huge(40000, 'x');
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Http("POST", "/v1/completions", {{"prompt", {"Once", huge}}, {"max_tokens", 4}}).first, 400);
  }
  // gRPC calls that time out.
  for (int i = 0; i < 3; ++i) {
    v1::GenerateResponse response;
    const grpc::Status st = stub_->Generate(Context("", 0.001).get(), GrpcGreedy("Once", 2), &response);
    EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  }
  EXPECT_TRUE(WaitFor([&] { return Http("GET", "/ready").first == 200; }));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Http("POST", "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 2}}).first, 200) << i;
  }
}

TEST_F(FrontEndsTest, PlainTemplateSessionsReuseTheReply) {
  REQUIRE_SHARED_FILE("models/stories260K.gguf");  // its vocabulary has no chat template: plain
  Start(::kvserve::testing::TestConfig());
  json messages = json::array({{{"role", "user"}, {"content", "Tell me a story about a dog."}}});
  int previous_total = 0;
  for (int turn = 1; turn <= 3; ++turn) {
    auto [status, body] = Http("POST", "/v1/chat/completions",
                               {{"messages", messages}, {"session_id", "chat"}, {"max_tokens", 24},
                                {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_EQ(status, 200) << body.dump();
    const int cached = body["usage"]["prompt_tokens_details"]["cached_tokens"];
    // The previous turn's prompt and reply (but its last token, never computed) are reused.
    if (turn > 1) {
      EXPECT_GE(cached, previous_total - 1) << "turn " << turn;
    }
    previous_total = body["usage"]["total_tokens"];
    messages.push_back({{"role", "assistant"}, {"content", body["choices"][0]["message"]["content"]}});
    messages.push_back({{"role", "user"}, {"content", "And then?"}});
  }
}

// A blocking HTTP/1.1 exchange on a fresh connection: the status, or nullopt when no
// response arrived within `seconds` (a receive timeout on the socket).
std::optional<int> HttpStatusWithin(int port, const std::string& method, const std::string& target,
                                    const std::string& body, double seconds) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  try {
    boost::asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                  static_cast<uint16_t>(port)));
    timeval timeout{static_cast<time_t>(seconds), 0};
    setsockopt(stream.socket().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    http::request<http::string_body> req{method == "POST" ? http::verb::post : http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    return static_cast<int>(res.result_int());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

TEST_F(FrontEndsTest, HealthIsAnsweredWhileARequestBodyIsHandled) {
  // One I/O thread. A generation request is held inside the request handling (Engine::Submit
  // waits for the test): /health must still be answered, as it is not on the I/O thread.
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  EngineConfig config = ::kvserve::testing::TestConfig();
  config.test_hooks.before_enqueue = [&](const GenerationRequest&) {
    if (!first.exchange(false)) return;
    entered.set_value();
    released.wait();
  };
  Start(config);
  auto server = HttpServer::Start(&ctx_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  http_ = std::move(server).value();
  const int port = http_->port();
  auto held = std::async(std::launch::async, [&] {
    return HttpStatusWithin(port, "POST", "/v1/completions", R"({"prompt":"Once","max_tokens":2})", 60);
  });
  entered.get_future().wait();
  EXPECT_EQ(HttpStatusWithin(port, "GET", "/health", "", 10), std::optional<int>(200));
  release.set_value();
  EXPECT_EQ(held.get(), std::optional<int>(200));
}

// Structured outputs over HTTP: a chat completion under response_format json_schema at
// temperature 1 is valid JSON of its schema whenever it stops; vLLM's guided_choice and
// llama.cpp's grammar on completions; an unsupported keyword is a 400 naming it and where.
TEST_F(FrontEndsTest, StructuredOutputsOverHttp) {
  Start(::kvserve::testing::TestConfig());
  const json schema = json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "pet": {"enum": ["cat", "dog", null]}}, "required": ["name", "age"], "additionalProperties": false})");
  auto [status, body] = Http("POST", "/v1/chat/completions",
                             {{"messages", {{{"role", "user"}, {"content", "Tell me about Lily."}}}},
                              {"temperature", 1}, {"seed", 3}, {"n", 4}, {"max_tokens", 400},
                              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}}}}}});
  ASSERT_EQ(status, 200) << body.dump();
  int stopped = 0;
  for (const json& choice : body["choices"]) {
    if (choice["finish_reason"] != "stop") continue;
    ++stopped;
    const json v = json::parse(choice["message"]["content"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(v.is_object()) << choice.dump();
    EXPECT_TRUE(v.contains("name") && v["name"].is_string()) << v.dump();
    EXPECT_TRUE(v.contains("age") && v["age"].is_number_integer() && v["age"] >= 0 && v["age"] <= 120) << v.dump();
    for (const auto& [key, value] : v.items()) EXPECT_TRUE(key == "name" || key == "age" || key == "pet") << key;
  }
  EXPECT_GT(stopped, 0) << body.dump();

  auto [cstatus, cbody] = Http("POST", "/v1/completions", {{"prompt", "The sky is"}, {"max_tokens", 8},
                                                             {"guided_choice", {"blue", "grey"}}});
  ASSERT_EQ(cstatus, 200) << cbody.dump();
  const std::string text = cbody["choices"][0]["text"];
  EXPECT_TRUE(text == "blue" || text == "grey") << text;
  auto [gstatus, gbody] = Http("POST", "/v1/completions", {{"prompt", "Count:"}, {"max_tokens", 8}, {"temperature", 1},
                                                             {"grammar", "root ::= [1-9] \"-\" [1-9]"}});
  ASSERT_EQ(gstatus, 200) << gbody.dump();
  const std::string g = gbody["choices"][0]["text"];
  EXPECT_TRUE(g.size() == 3 && g[0] >= '1' && g[0] <= '9' && g[1] == '-' && g[2] >= '1' && g[2] <= '9') << g;

  auto [bstatus, bbody] = Http("POST", "/v1/chat/completions", json::parse(R"({
      "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "bad",
          "schema": {"properties": {"a": {"not": {"enum": [1]}}}}}}})"));
  EXPECT_EQ(bstatus, 400);
  EXPECT_EQ(bbody["error"]["param"], "response_format");
  const std::string message = bbody["error"]["message"];
  EXPECT_NE(message.find("not at /properties/a"), std::string::npos) << message;
  // Over the size limit: refused by the builder, naming the field.
  auto [lstatus, lbody] = Http("POST", "/v1/completions", {{"prompt", "x"}, {"guided_regex", std::string(kMaxStructuredBytes + 1, 'a')}});
  EXPECT_EQ(lstatus, 400);
  EXPECT_EQ(lbody["error"]["param"], "guided_regex");

  // gRPC: the same constraint as a oneof in the request options.
  v1::GenerateRequest greq = GrpcGreedy("The answer is", 40);
  greq.mutable_sampling()->set_ignore_eos(false);
  greq.mutable_options()->mutable_structured()->set_json_schema(R"({"enum": ["yes", "no"]})");
  v1::GenerateResponse response;
  ASSERT_TRUE(stub_->Generate(Context().get(), greq, &response).ok());
  std::string out;
  for (const auto& c : response.choices()) out += c.text();
  const json answer = json::parse(out, nullptr, false);  // JSON whitespace around it is allowed
  EXPECT_TRUE(answer == "yes" || answer == "no") << out;
  greq.mutable_options()->mutable_structured()->set_json_schema(R"({"not": {"enum": [1]}})");
  grpc::Status st = stub_->Generate(Context().get(), greq, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("not at /"), std::string::npos) << st.error_message();
}

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
  // Streamed: the reasoning deltas add up to the same text; no content delta carries it.
  std::string reasoning, reasoning_alias, content;
  for (const json& event : Events(Stream("/v1/chat/completions", chat))) {
    if (event["choices"].empty()) continue;
    const json& delta = event["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    reasoning_alias += delta.value("reasoning", "");
    content += delta.value("content", "");
  }
  EXPECT_EQ(reasoning, expected);
  EXPECT_EQ(reasoning_alias, expected);
  EXPECT_EQ(content, "");

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

}  // namespace front_ends_test
}  // namespace kvserve
