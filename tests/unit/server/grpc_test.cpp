// gRPC front end, in process: GrpcServer on a loopback port over a real engine
// (stories260K, or synthetic:tiny without ../shared) and the generated C++ stub as client.
// Unary output equals the streamed concatenation (greedy), streams arrive incrementally,
// a client cancel or a deadline aborts the engine request and frees its KV blocks, bad
// arguments and auth failures get their codes, health follows readiness and shutdown,
// reflection lists the services. Health and reflection are called with hand-encoded
// protobuf bytes (their generated C++ stubs are not packaged).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fmt/format.h>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "generation.grpc.pb.h"
#include "server/grpc/grpc_server.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace grpc_test {

using ::kvserve::testing::LoadModel;
using ::kvserve::testing::MakeEngine;
using ::kvserve::testing::SharedFileExists;
using ::kvserve::testing::SharedPath;
using ::kvserve::testing::TestConfig;
using ::kvserve::testing::WaitFor;

constexpr int kHealthServing = 1;
constexpr int kHealthNotServing = 2;

std::string ModelSpec() {
  return SharedFileExists("models/stories260K.gguf") ? SharedPath("models/stories260K.gguf") : "synthetic:tiny";
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// A protobuf message with one string field `field` (what HealthCheckRequest and
// ServerReflectionRequest.list_services need).
std::string StringField(int field, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>((field << 3) | 2));
  out.push_back(static_cast<char>(value.size()));  // short strings only
  return out + value;
}

// HealthCheckResponse.status (field 1, varint), or -1.
int HealthStatus(const std::string& response) {
  if (response.size() == 2 && response[0] == 0x08) return response[1];
  return response.empty() ? 0 : -1;  // UNKNOWN is the default (empty message)
}

// A raw bidi-streaming call (also used for server-streaming methods: one request, then
// half-close) with byte-buffer messages.
class RawStream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawStream(grpc::GenericStub* stub, const std::string& method, const std::string& request) : request_(ToBuffer(request)) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub->PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
    StartWrite(&request_);
    StartRead(&response_);
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) StartWritesDone();
  }
  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok) return;
    messages_.push_back(FromBuffer(response_));
    cv_.notify_all();
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    done_ = true;
    cv_.notify_all();
  }
  // The i-th message, waiting up to 10 s.
  std::optional<std::string> Message(size_t i) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return messages_.size() > i || done_; });
    if (messages_.size() > i) return messages_[i];
    return std::nullopt;
  }
  grpc::Status Await() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> messages_;
  grpc::Status status_;
  bool done_ = false;
};

class GrpcTest : public ::testing::Test {
 protected:
  // A windowed session's turn runs past the context, up to the context length (512).
  static constexpr int kLongTurn = 500;
  void StartServer(std::vector<std::string> keys = {}) {
    EngineConfig config = TestConfig();
    config.chat_window_tokens = 64;  // session requests may run past the context (deadline test)
    // Steps of at least 2 ms, so a long turn (kLongTurn tokens) runs for a second or more:
    // long enough to cancel it, let its deadline pass, or find its session busy.
    config.test_hooks.fail_forward = [](int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return false;
    };
    config.test_hooks.before_enqueue = before_enqueue_;
    model_ = LoadModel(ModelSpec());
    ASSERT_NE(model_, nullptr);
    engine_ = MakeEngine(model_, config);
    ASSERT_NE(engine_, nullptr);
    ctx_ = std::make_unique<ServerContext>();
    ctx_->engine = engine_.get();
    ctx_->model_id = "stories260K";
    ctx_->backend_name = "cpu";
    ctx_->options.host = "127.0.0.1";
    ctx_->options.grpc_port = 0;
    ctx_->options.api_keys = keys;
    if (!keys.empty()) key_ = keys.front();
    ctx_->loading = false;
    auto server = GrpcServer::Start(ctx_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(fmt::format("127.0.0.1:{}", server_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(0);
    server_.reset();
    if (engine_) engine_->Stop();
  }

  std::unique_ptr<grpc::ClientContext> Context(double timeout_seconds = 60) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
    if (!key_.empty()) c->AddMetadata("authorization", "Bearer " + key_);
    return c;
  }

  static v1::GenerateRequest Greedy(int max_tokens, int n = 1) {
    v1::GenerateRequest r;
    r.set_prompt("Once upon a time");
    r.mutable_sampling()->set_temperature(0);
    r.mutable_sampling()->set_max_tokens(max_tokens);
    r.mutable_sampling()->set_ignore_eos(true);
    r.mutable_options()->set_n(n);
    return r;
  }

  // grpc.health.v1.Health/Check for `service`: the status enum, or -1 on an RPC error.
  int HealthCheck(const std::string& service) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::ByteBuffer request = ToBuffer(service.empty() ? "" : StringField(1, service));
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic_->UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    if (!status.ok()) return -1;
    return HealthStatus(FromBuffer(response));
  }

  struct Streamed {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::string> text;
    std::vector<v1::FinishReason> finish;
    int messages_with_choices = 0;
    int first_message_tokens = -1;
    std::optional<v1::Usage> usage;
    bool finish_before_last_delta = false;  // a delta after its choice's finish_reason
    grpc::Status status;
  };

  Streamed ReadAll(grpc::ClientReader<v1::GenerateStreamResponse>* reader, int n) {
    Streamed s;
    s.tokens.resize(n);
    s.text.resize(n);
    s.finish.assign(n, v1::FINISH_REASON_UNSPECIFIED);
    v1::GenerateStreamResponse m;
    while (reader->Read(&m)) {
      if (m.has_usage()) {
        EXPECT_EQ(m.choices_size(), 0);
        s.usage = m.usage();
      }
      if (m.choices_size() > 0) {
        EXPECT_FALSE(s.usage.has_value()) << "usage must come last";
        int tokens = 0;
        for (const v1::ChoiceDelta& d : m.choices()) {
          EXPECT_GE(d.index(), 0);
          EXPECT_LT(d.index(), n);
          if (s.finish[d.index()] != v1::FINISH_REASON_UNSPECIFIED) s.finish_before_last_delta = true;
          s.tokens[d.index()].insert(s.tokens[d.index()].end(), d.token_ids().begin(), d.token_ids().end());
          s.text[d.index()] += d.text();
          if (d.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) s.finish[d.index()] = d.finish_reason();
          tokens += d.token_ids_size();
        }
        if (s.messages_with_choices++ == 0) s.first_message_tokens = tokens;
      }
    }
    s.status = reader->Finish();
    return s;
  }

  EngineStats Stats() const { return engine_->GetStats(); }
  int64_t Outcome(RequestOutcome o) const { return Stats().requests_total[static_cast<int>(o)]; }
  bool CacheIdle() const {
    const EngineStats s = Stats();
    return s.cache.used_blocks == 0 && s.running == 0 && s.waiting == 0;
  }

  std::function<void(const GenerationRequest&)> before_enqueue_;  // set before StartServer
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServerContext> ctx_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::string key_;
};

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

TEST_F(GrpcTest, ClientCancelAbortsAndFreesTheCache) {
  StartServer();
  v1::ModelInfo info;
  auto ci = Context();
  ASSERT_TRUE(stub_->GetModelInfo(ci.get(), v1::GetModelInfoRequest(), &info).ok());
  // As long as the context allows: hundreds of steps, while the cancel takes a few ms.
  v1::GenerateRequest request = Greedy(info.context_length() - 16, 2);
  auto c = Context();
  auto reader = stub_->GenerateStream(c.get(), request);
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(reader->Read(&m));
  // (The stats snapshot is published after the step whose output we just read.)
  EXPECT_TRUE(WaitFor([&] { return Stats().cache.used_blocks > 0; }));
  c->TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return Outcome(RequestOutcome::kAborted) == 1 && CacheIdle(); }))
      << "used blocks " << Stats().cache.used_blocks << ", running " << Stats().running;
  EXPECT_EQ(Outcome(RequestOutcome::kOk), 0);
}

TEST_F(GrpcTest, UnaryClientCancelAborts) {
  StartServer();
  v1::GenerateRequest request = Greedy(kLongTurn);
  request.mutable_options()->set_session_id("endless");  // the sliding window lets it run on
  auto c = Context();
  v1::GenerateResponse response;
  std::promise<grpc::Status> done;
  stub_->async()->Generate(c.get(), &request, &response, [&](grpc::Status s) { done.set_value(std::move(s)); });
  ASSERT_TRUE(WaitFor([&] { return Stats().running == 1 && Stats().generation_tokens_total > 10; }));
  c->TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return Outcome(RequestOutcome::kAborted) == 1 && Stats().running == 0; }));
}

TEST_F(GrpcTest, DeadlineExceededAbortsTheRequest) {
  StartServer();
  v1::GenerateRequest request = Greedy(kLongTurn);
  request.mutable_options()->set_session_id("endless");
  auto c = Context(/*timeout_seconds=*/0.3);
  auto reader = stub_->GenerateStream(c.get(), request);
  v1::GenerateStreamResponse m;
  int messages = 0;
  while (reader->Read(&m)) ++messages;
  EXPECT_GT(messages, 0);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitFor([&] { return Outcome(RequestOutcome::kAborted) == 1 && Stats().running == 0; }));
  // The session keeps its (windowed) cache until ended; then everything is free.
  v1::EndSessionRequest end;
  end.set_session_id("endless");
  v1::EndSessionResponse ended;
  auto c2 = Context();
  EXPECT_TRUE(stub_->EndSession(c2.get(), end, &ended).ok());
  auto c3 = Context();
  EXPECT_EQ(stub_->EndSession(c3.get(), end, &ended).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(WaitFor([&] { return CacheIdle(); })) << "used blocks " << Stats().cache.used_blocks;
}

// Issue 54, item 2: a structured request waits for its grammar's compile (up to the compile
// timeout) on a thread of the service's own, never on gRPC's: while such requests are held
// there, other calls are answered; a held call the client gave up on is aborted once its
// compile is done; the held ones then run under their constraint.
TEST_F(GrpcTest, StructuredRequestsWaitForTheirGrammarOffGrpcThreads) {
  std::mutex mu;
  std::condition_variable cv;
  int held = 0;
  bool release = false;
  before_enqueue_ = [&](const GenerationRequest& r) {
    if (!r.structured.active()) return;
    std::unique_lock<std::mutex> lock(mu);
    ++held;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  StartServer();
  v1::GenerateRequest structured = Greedy(8);
  structured.mutable_sampling()->set_ignore_eos(false);
  *structured.mutable_options()->mutable_structured()->mutable_choice()->add_choices() = "yes";
  *structured.mutable_options()->mutable_structured()->mutable_choice()->add_choices() = "no";
  // More held calls than this machine's cores (gRPC's callback threads follow them).
  const int kHeld = 2 * static_cast<int>(std::max(4u, std::thread::hardware_concurrency()));
  std::vector<std::future<Streamed>> streams;
  for (int i = 0; i < kHeld; ++i) {
    streams.push_back(std::async(std::launch::async, [&] {
      auto c = Context();
      auto reader = stub_->GenerateStream(c.get(), structured);
      return ReadAll(reader.get(), 1);
    }));
  }
  auto cancelled_context = Context(/*timeout_seconds=*/0.5);
  v1::GenerateResponse cancelled_response;
  std::promise<grpc::Status> cancelled;
  stub_->async()->Generate(cancelled_context.get(), &structured, &cancelled_response,
                           [&](grpc::Status s) { cancelled.set_value(std::move(s)); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return held > 0; }));
  }
  // Answered while the structured calls wait.
  v1::GenerateResponse plain;
  auto c1 = Context(/*timeout_seconds=*/20);
  const grpc::Status plain_status = stub_->Generate(c1.get(), Greedy(4), &plain);
  EXPECT_TRUE(plain_status.ok()) << plain_status.error_message();
  v1::ModelInfo info;
  auto c2 = Context(/*timeout_seconds=*/20);
  EXPECT_TRUE(stub_->GetModelInfo(c2.get(), v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(cancelled.get_future().get().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& f : streams) {
    const Streamed s = f.get();
    ASSERT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_TRUE(s.text[0] == "yes" || s.text[0] == "no") << s.text[0];
  }
  // The given-up call's request was aborted (or refused once draining), and nothing is left.
  EXPECT_TRUE(WaitFor([&] { return CacheIdle(); })) << "used blocks " << Stats().cache.used_blocks;
  EXPECT_GE(Outcome(RequestOutcome::kOk), kHeld + 1);  // the given-up one may have finished first
  EXPECT_EQ(Outcome(RequestOutcome::kOk) + Outcome(RequestOutcome::kAborted), kHeld + 2);
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
