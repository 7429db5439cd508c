// gRPC calls that end early or wait: a client cancel or a deadline aborts the engine request and
// frees its KV blocks; a structured request waits for its grammar off gRPC's threads.
#include "tests/unit/server/grpc_fixture.h"

namespace kvserve {
namespace grpc_test {

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

}  // namespace grpc_test
}  // namespace kvserve
