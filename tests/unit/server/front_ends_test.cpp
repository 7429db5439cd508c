// Both front ends over one engine, through the one RequestBuilder: the tenant's prefix-cache
// domain is the same on HTTP and gRPC and no other key reaches it; gRPC decodes requests
// itself (INVALID_ARGUMENT for invalid UTF-8) and sends one delta per choice per message;
// "model" may be left out on both; the queue depth survives every refusal path and /ready
// follows it; the HTTP I/O threads keep answering while a request body is being handled.
#include "tests/unit/server/front_ends_fixture.h"

namespace kvserve {
namespace front_ends_test {

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

}  // namespace front_ends_test
}  // namespace kvserve
