// gRPC front end, in process: GrpcServer on a loopback port over a real engine
// (stories260K, or synthetic:tiny without ../shared) and the generated C++ stub as client.
// Unary output equals the streamed concatenation (greedy), streams arrive incrementally, bad
// arguments and auth failures get their codes (cancels and deadlines: grpc_calls_test.cpp), health follows readiness and shutdown,
// reflection lists the services. Health and reflection are called with hand-encoded
// protobuf bytes (their generated C++ stubs are not packaged).
#include "tests/unit/server/grpc_fixture.h"

namespace kvserve {
namespace grpc_test {

TEST_F(GrpcTest, UnaryEqualsStreamConcatenation) {
  StartServer();
  v1::GenerateResponse unary;
  auto c1 = Context();
  grpc::Status status = stub_->Generate(c1.get(), Greedy(24, 2), &unary);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(unary.choices_size(), 2);
  EXPECT_EQ(unary.model(), "stories260K");
  EXPECT_EQ(unary.id().rfind("gen-", 0), 0u);
  EXPECT_EQ(unary.usage().completion_tokens(), 48);
  EXPECT_GT(unary.usage().prompt_tokens(), 0);

  auto c2 = Context();
  auto reader = stub_->GenerateStream(c2.get(), Greedy(24, 2));
  const Streamed s = ReadAll(reader.get(), 2);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  for (int i = 0; i < 2; ++i) {
    const v1::Choice& u = unary.choices(i);
    EXPECT_EQ(u.index(), i);
    EXPECT_EQ(u.token_ids_size(), 24);
    EXPECT_EQ(std::vector<int32_t>(u.token_ids().begin(), u.token_ids().end()), s.tokens[i]);
    EXPECT_EQ(u.text(), s.text[i]);
    EXPECT_FALSE(u.text().empty());
    EXPECT_EQ(u.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(s.finish[i], v1::FINISH_REASON_LENGTH);
  }
  // Greedy choices of one prompt agree.
  EXPECT_EQ(s.tokens[0], s.tokens[1]);
  EXPECT_FALSE(s.finish_before_last_delta);
  ASSERT_TRUE(s.usage.has_value());
  EXPECT_EQ(s.usage->completion_tokens(), 48);
  EXPECT_EQ(s.usage->prompt_tokens(), unary.usage().prompt_tokens());
  EXPECT_TRUE(WaitFor([&] { return Outcome(RequestOutcome::kOk) == 2 && CacheIdle(); }));
}

TEST_F(GrpcTest, StreamingDeliversTokensIncrementally) {
  StartServer();
  auto c = Context();
  auto reader = stub_->GenerateStream(c.get(), Greedy(200));
  const Streamed s = ReadAll(reader.get(), 1);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.tokens[0].size(), 200u);
  EXPECT_GT(s.messages_with_choices, 1);
  EXPECT_GE(s.first_message_tokens, 1);
  EXPECT_LT(s.first_message_tokens, 200);
}

TEST_F(GrpcTest, BadArgumentsGetTheirCodes) {
  StartServer();
  const auto call = [&](const v1::GenerateRequest& r) {
    v1::GenerateResponse response;
    auto c = Context();
    return stub_->Generate(c.get(), r, &response).error_code();
  };
  const auto stream_call = [&](const v1::GenerateRequest& r) {
    auto c = Context();
    auto reader = stub_->GenerateStream(c.get(), r);
    v1::GenerateStreamResponse m;
    EXPECT_FALSE(reader->Read(&m));
    return reader->Finish().error_code();
  };
  using grpc::StatusCode;
  v1::GenerateRequest r = Greedy(8);
  r.mutable_sampling()->set_temperature(-1);
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(stream_call(r), StatusCode::INVALID_ARGUMENT);
  r = Greedy(8);
  r.mutable_sampling()->set_top_p(0);
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);
  r = Greedy(8);
  r.clear_prompt();
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);  // no prompt at all
  r = Greedy(8);
  r.add_prompt_tokens(1);
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);  // both prompt and prompt_tokens
  r = Greedy(8);
  r.clear_prompt();
  r.add_prompt_tokens(1);
  r.add_prompt_tokens(1 << 30);
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);  // token outside the vocabulary
  r = Greedy(8);
  r.mutable_options()->set_n(1000);
  EXPECT_EQ(call(r), StatusCode::INVALID_ARGUMENT);
  r = Greedy(1000000);
  EXPECT_EQ(call(r), StatusCode::OUT_OF_RANGE);  // beyond the context, no session window
  EXPECT_EQ(stream_call(r), StatusCode::OUT_OF_RANGE);
  r = Greedy(8);
  r.mutable_options()->set_model("gpt-4");
  EXPECT_EQ(call(r), StatusCode::NOT_FOUND);
  v1::ChatRequest chat;
  auto* m = chat.add_messages();
  m->set_role("wizard");
  m->set_content("hi");
  v1::GenerateResponse response;
  auto c = Context();
  EXPECT_EQ(stub_->Chat(c.get(), chat, &response).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::DetokenizeRequest detok;
  detok.add_token_ids(-1);
  v1::DetokenizeResponse detok_response;
  auto c2 = Context();
  EXPECT_EQ(stub_->Detokenize(c2.get(), detok, &detok_response).error_code(), StatusCode::INVALID_ARGUMENT);
  // Every refused generation request counts as rejected (the chat one included).
  EXPECT_EQ(ctx_->requests_rejected.load(), 11);
  // ... and none of them disturbed the engine.
  v1::GenerateResponse ok;
  auto c3 = Context();
  EXPECT_TRUE(stub_->Generate(c3.get(), Greedy(4), &ok).ok());
}

TEST_F(GrpcTest, BusySessionIsFailedPrecondition) {
  StartServer();
  v1::GenerateRequest long_turn = Greedy(kLongTurn);
  long_turn.mutable_options()->set_session_id("busy");
  auto c1 = Context();
  auto reader = stub_->GenerateStream(c1.get(), long_turn);
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(reader->Read(&m));
  v1::GenerateRequest second = Greedy(4);
  second.mutable_options()->set_session_id("busy");
  v1::GenerateResponse response;
  auto c2 = Context();
  EXPECT_EQ(stub_->Generate(c2.get(), second, &response).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The x-session-id metadata names the session too (what a gateway hashes on) ...
  auto c3 = Context();
  c3->AddMetadata("x-session-id", "busy");
  EXPECT_EQ(stub_->Generate(c3.get(), Greedy(4), &response).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // ... and must agree with the request's session_id.
  auto c4 = Context();
  c4->AddMetadata("x-session-id", "other");
  EXPECT_EQ(stub_->Generate(c4.get(), second, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  c1->TryCancel();
  while (reader->Read(&m)) {
  }
  reader->Finish();
}

TEST_F(GrpcTest, ApiKeyIsRequired) {
  StartServer({"sk-right"});
  const auto generate = [&](const std::optional<std::string>& authorization) {
    grpc::ClientContext c;
    if (authorization) c.AddMetadata("authorization", *authorization);
    v1::GenerateResponse response;
    return stub_->Generate(&c, Greedy(4), &response).error_code();
  };
  EXPECT_EQ(generate(std::nullopt), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(generate("Bearer sk-wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(generate("sk-right"), grpc::StatusCode::UNAUTHENTICATED);  // no scheme
  EXPECT_EQ(generate("Bearer sk-right"), grpc::StatusCode::OK);
  {
    grpc::ClientContext c;
    auto reader = stub_->GenerateStream(&c, Greedy(4));
    v1::GenerateStreamResponse m;
    EXPECT_FALSE(reader->Read(&m));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext c;
    v1::ModelInfo info;
    EXPECT_EQ(stub_->GetModelInfo(&c, v1::GetModelInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(ctx_->requests_rejected.load(), 0);  // auth failures are not "rejected" requests
  // Health stays open.
  EXPECT_EQ(HealthCheck(""), kHealthServing);
}

TEST_F(GrpcTest, HealthFollowsReadinessAndShutdown) {
  StartServer();
  EXPECT_EQ(HealthCheck(""), kHealthServing);
  EXPECT_EQ(HealthCheck("kvserve.v1.Generation"), kHealthServing);
  ctx_->draining = true;
  EXPECT_TRUE(WaitFor([&] { return HealthCheck("kvserve.v1.Generation") == kHealthNotServing; }));
  EXPECT_EQ(HealthCheck(""), kHealthNotServing);
  v1::GenerateResponse response;
  auto c = Context();
  EXPECT_EQ(stub_->Generate(c.get(), Greedy(4), &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  ctx_->draining = false;
  EXPECT_TRUE(WaitFor([&] { return HealthCheck("kvserve.v1.Generation") == kHealthServing; }));

  // A watcher sees NOT_SERVING when the server shuts down, before its call is cancelled.
  RawStream watch(generic_.get(), "/grpc.health.v1.Health/Watch", StringField(1, "kvserve.v1.Generation"));
  auto first = watch.Message(0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(HealthStatus(*first), kHealthServing);
  std::thread shutdown([&] { server_->Shutdown(1.0); });
  auto second = watch.Message(1);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(HealthStatus(*second), kHealthNotServing);
  watch.Await();
  shutdown.join();
}

TEST_F(GrpcTest, ShutdownLetsRunningStreamsFinishWithinGrace) {
  StartServer();
  auto c = Context();
  auto reader = stub_->GenerateStream(c.get(), Greedy(64));
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(reader->Read(&m));
  std::thread shutdown([&] { server_->Shutdown(30.0); });
  const Streamed s = ReadAll(reader.get(), 1);
  EXPECT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_TRUE(s.usage.has_value());
  shutdown.join();
  // New calls are refused once the server is down.
  v1::GenerateResponse response;
  auto c2 = Context(2);
  EXPECT_FALSE(stub_->Generate(c2.get(), Greedy(4), &response).ok());
}

TEST_F(GrpcTest, ReflectionListsTheServices) {
  StartServer();
  RawStream reflection(generic_.get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                       StringField(7, "*"));  // list_services
  auto response = reflection.Message(0);
  ASSERT_TRUE(response.has_value());
  EXPECT_NE(response->find("kvserve.v1.Generation"), std::string::npos);
  EXPECT_NE(response->find("grpc.health.v1.Health"), std::string::npos);
  EXPECT_TRUE(reflection.Await().ok());
}

TEST_F(GrpcTest, ChatTokenizeDetokenizeModelInfo) {
  StartServer();
  v1::ModelInfo info;
  auto c0 = Context();
  ASSERT_TRUE(stub_->GetModelInfo(c0.get(), v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_id(), "stories260K");
  EXPECT_EQ(info.vocab_size(), model_->tokenizer().vocab_size());
  EXPECT_EQ(info.kv_dtype(), "f32");
  EXPECT_EQ(info.block_size(), 16);
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.chat_template(), "plain");  // stories260K has no template
  EXPECT_GT(info.context_length(), 0);

  v1::TokenizeRequest tr;
  tr.set_text("Once upon a time");
  v1::TokenizeResponse tokens;
  auto c1 = Context();
  ASSERT_TRUE(stub_->Tokenize(c1.get(), tr, &tokens).ok());
  EXPECT_EQ(std::vector<int32_t>(tokens.token_ids().begin(), tokens.token_ids().end()),
            model_->tokenizer().Encode("Once upon a time", true));
  v1::DetokenizeRequest dr;
  *dr.mutable_token_ids() = tokens.token_ids();
  v1::DetokenizeResponse text;
  auto c2 = Context();
  ASSERT_TRUE(stub_->Detokenize(c2.get(), dr, &text).ok());
  EXPECT_EQ(text.text(), "Once upon a time");

  v1::ChatRequest chat;
  auto* m = chat.add_messages();
  m->set_role("user");
  m->set_content("Tell me a story.");
  chat.mutable_sampling()->set_temperature(0);
  chat.mutable_sampling()->set_max_tokens(12);
  chat.mutable_sampling()->set_ignore_eos(true);
  v1::GenerateResponse unary;
  auto c3 = Context();
  ASSERT_TRUE(stub_->Chat(c3.get(), chat, &unary).ok());
  ASSERT_EQ(unary.choices_size(), 1);
  EXPECT_EQ(unary.choices(0).token_ids_size(), 12);
  auto c4 = Context();
  auto reader = stub_->ChatStream(c4.get(), chat);
  const Streamed s = ReadAll(reader.get(), 1);
  ASSERT_TRUE(s.status.ok());
  EXPECT_EQ(s.text[0], unary.choices(0).text());
  // The prompt is the rendered chat.
  v1::TokenizeRequest chat_tokens;
  *chat_tokens.mutable_messages() = chat.messages();
  v1::TokenizeResponse rendered;
  auto c5 = Context();
  ASSERT_TRUE(stub_->Tokenize(c5.get(), chat_tokens, &rendered).ok());
  EXPECT_EQ(rendered.rendered_prompt(), "User: Tell me a story.\nAssistant:");
  EXPECT_EQ(unary.usage().prompt_tokens(), rendered.token_ids_size());
}

}  // namespace grpc_test
}  // namespace kvserve
