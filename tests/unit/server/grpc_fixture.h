// The gRPC tests' fixture (grpc_test.cpp, grpc_calls_test.cpp): GrpcServer on a loopback port
// over a real engine (stories260K, or synthetic:tiny without ../shared), the generated C++ stub
// and raw calls with hand-encoded protobuf bytes.
#pragma once

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

inline std::string ModelSpec() {
  return SharedFileExists("models/stories260K.gguf") ? SharedPath("models/stories260K.gguf") : "synthetic:tiny";
}

inline grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// A protobuf message with one string field `field` (what HealthCheckRequest and
// ServerReflectionRequest.list_services need).
inline std::string StringField(int field, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>((field << 3) | 2));
  out.push_back(static_cast<char>(value.size()));  // short strings only
  return out + value;
}

// HealthCheckResponse.status (field 1, varint), or -1.
inline int HealthStatus(const std::string& response) {
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

}  // namespace grpc_test
}  // namespace kvserve
