// Admission and the engine's own bookkeeping under the paths that once wedged or crashed it:
// the queue depth stays exact for requests that finish without a step, abort while waiting
// or fail at admission; n is bounded by max_num_seqs and forked choices never overflow the
// running set; a fault cools down instead of latching; Stop never leaves a stream open; a
// byte movement that fails fails its requests instead of the process.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace admission_test {

using testing::Collect;
using testing::Greedy;
using testing::LoadModel;
using testing::MakeEngine;
using testing::RunRequest;
using testing::TestConfig;
using testing::WaitFor;

// A gate the engine thread waits at inside a step (EngineTestHooks::fail_forward).
class Gate {
 public:
  std::function<bool(int64_t)> Hook() {
    return [this](int64_t) {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      return false;
    };
  }
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Opens the gate when the test ends, before the engine (declared earlier) stops.
  struct OpenAtExit {
    Gate& gate;
    ~OpenAtExit() { gate.Open(); }
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(AdmissionTest, RequestsThatFinishWithoutAStepLeaveTheQueue) {
  EngineConfig config = TestConfig();
  config.max_queued_requests = 2;
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  // max_tokens 0 ends at admission; this wedged the queue at its limit after two requests.
  for (int i = 0; i < 6; ++i) {
    auto stream = engine->Submit(Greedy({1, 2, 3}, 0));
    ASSERT_TRUE(stream.ok()) << "request " << i << ": " << stream.status().ToString();
    testing::RunResult r = Collect(**stream);
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(r.choices[0].finish, FinishReason::kLength);
  }
  // Failed at admission: a session busy with another request.
  // Long enough to outlast the four turns below on a loaded machine (200 tokens did not always).
  GenerationRequest holder = Greedy({1, 2, 3}, 2000);
  holder.session_id = "s";
  auto running = engine->Submit(holder);
  ASSERT_TRUE(running.ok());
  for (int i = 0; i < 4; ++i) {
    GenerationRequest busy = Greedy({1, 2, 3}, 4);
    busy.session_id = "s";
    auto stream = engine->Submit(busy);
    ASSERT_TRUE(stream.ok()) << "request " << i << ": " << stream.status().ToString();
    EXPECT_EQ(Collect(**stream).status.code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(Collect(**running).status.ok());
  EXPECT_TRUE(WaitFor([&] { return engine->AcceptingRequests(); }));
  EXPECT_TRUE(RunRequest(*engine, Greedy({1, 2, 3}, 4)).status.ok());
}

TEST(AdmissionTest, AbortedWaitingRequestsLeaveTheQueueAndAFullQueueIsNotAccepting) {
  Gate gate;
  EngineConfig config = TestConfig();
  config.max_queued_requests = 2;
  config.max_num_seqs = 1;
  config.test_hooks.fail_forward = gate.Hook();
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  Gate::OpenAtExit open_at_exit{gate};
  auto running = engine->Submit(Greedy({1, 2, 3}, 4));
  ASSERT_TRUE(running.ok());
  gate.WaitUntilHeld();  // the engine thread is inside the first step
  auto a = engine->Submit(Greedy({4, 5}, 4));
  auto b = engine->Submit(Greedy({6, 7}, 4));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(engine->Submit(Greedy({8}, 4)).status().code(), StatusCode::kResourceExhausted);
  // A request the queue cannot take compiles nothing (issue 54, item 2): its structured output
  // would be a 400 if it were compiled first.
  GenerationRequest structured = Greedy({8}, 4);
  structured.structured.kind = StructuredOutputSpec::Kind::kRegex;
  structured.structured.text = "(unclosed";
  EXPECT_EQ(engine->Submit(structured).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(engine->AcceptingRequests());  // /ready must not say ready now
  engine->Abort((*a)->id());
  engine->Abort((*b)->id());
  gate.Open();
  EXPECT_EQ(Collect(**a).status.code(), StatusCode::kCancelled);
  EXPECT_EQ(Collect(**b).status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(Collect(**running).status.ok());
  EXPECT_TRUE(WaitFor([&] { return engine->AcceptingRequests(); }));
  // Exactly two places again.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(RunRequest(*engine, Greedy({1, 2}, 2)).status.ok()) << i;
}

TEST(AdmissionTest, NIsBoundedByMaxNumSeqs) {
  EngineConfig config = TestConfig();
  config.max_num_seqs = 1;
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  GenerationRequest two = Greedy({1, 2, 3}, 4);
  two.n = 2;
  const auto refused = engine->Submit(two);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("max_num_seqs"), std::string::npos);
  EXPECT_TRUE(RunRequest(*engine, Greedy({1, 2, 3}, 4)).status.ok());
}

TEST(AdmissionTest, ForkedChoicesWaitWhenTheRunningSetIsFull) {
  const auto model = LoadModel("synthetic:tiny");
  auto run = [&](int max_num_seqs) {
    EngineConfig config = TestConfig();
    config.max_num_seqs = max_num_seqs;
    auto engine = MakeEngine(model, config);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r = Greedy({1, 10 + i, 20 + i, 30 + i}, 12);
      r.n = 2;
      auto s = engine->Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    std::vector<testing::RunResult> results;
    for (auto& s : streams) results.push_back(Collect(*s));
    return results;
  };
  // Two sequences per step: three requests of two choices each used to overflow the logits
  // buffer (every request of the batch failed).
  const auto tight = run(2);
  const auto roomy = run(16);
  for (size_t i = 0; i < tight.size(); ++i) {
    ASSERT_TRUE(tight[i].status.ok()) << tight[i].status.ToString();
    EXPECT_EQ(tight[i].choices[0].tokens, tight[i].choices[1].tokens);  // greedy choices agree
    EXPECT_EQ(tight[i].choices[0].tokens, roomy[i].choices[0].tokens);
    EXPECT_EQ(tight[i].choices[0].tokens.size(), 12u);
  }
}

TEST(AdmissionTest, AFaultCoolsDownAndClears) {
  EngineConfig config = TestConfig();
  config.fault_cooldown_seconds = 0.2;
  std::atomic<bool> failing{true};
  config.test_hooks.fail_forward = [&](int64_t) { return failing.load(); };
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  for (int i = 0; i < kFaultAfterConsecutiveFailures; ++i) {
    auto s = engine->Submit(Greedy({1, 2}, 2));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(Collect(**s).status.code(), StatusCode::kInternal);
  }
  EXPECT_FALSE(engine->Healthy());
  EXPECT_FALSE(engine->AcceptingRequests());
  EXPECT_EQ(engine->Submit(Greedy({1, 2}, 2)).status().code(), StatusCode::kUnavailable);
  failing = false;
  // The fault used to latch for good; now the engine admits again after the cool-down and
  // one good pass clears it.
  ASSERT_TRUE(WaitFor([&] { return engine->Healthy(); }, 5));
  EXPECT_TRUE(RunRequest(*engine, Greedy({1, 2}, 2)).status.ok());
  // Stats are a snapshot the engine publishes after a step's streams end.
  EXPECT_TRUE(WaitFor([&] { return engine->GetStats().healthy; }));
  EXPECT_EQ(engine->GetStats().forward_errors_total, kFaultAfterConsecutiveFailures);
}

TEST(AdmissionTest, StopNeverLeavesAnAcceptedStreamOpen) {
  // Submit's enqueue races the loop's last intake at Stop: the hook holds a Submit that has
  // passed validation until Stop returned. It must be refused, or its stream must finish.
  std::promise<void> at_hook, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  EngineConfig config = TestConfig();
  config.test_hooks.before_enqueue = [&](const GenerationRequest&) {
    if (!first.exchange(false)) return;
    at_hook.set_value();
    released.wait();
  };
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  auto submitted = std::async(std::launch::async, [&] { return engine->Submit(Greedy({1, 2}, 4)); });
  at_hook.get_future().wait();
  engine->Stop();
  release.set_value();
  StatusOr<std::shared_ptr<RequestStream>> stream = submitted.get();
  if (stream.ok()) {
    EXPECT_TRUE(WaitFor([&] { return (*stream)->done(); }, 2)) << "an accepted stream never finishes";
  } else {
    EXPECT_EQ(stream.status().code(), StatusCode::kUnavailable);
  }
}

// A backend whose block movements fail on demand (copies, key shifts, swaps).
class FailingMoves final : public Backend {
 public:
  explicit FailingMoves(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Status InitKvCache(const KvSpec& spec, int num_blocks) override { return inner_->InitKvCache(spec, num_blocks); }
  Status Forward(const ForwardBatch& batch, std::span<float> logits) override { return inner_->Forward(batch, logits); }
  Status CopyBlocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override {
    return fail ? InternalError("copy failed (test)") : inner_->CopyBlocks(src_dst);
  }
  Status ShiftKeys(std::span<const int32_t> blocks, int delta) override {
    return fail ? InternalError("shift failed (test)") : inner_->ShiftKeys(blocks, delta);
  }
  Status ReadBlock(int32_t id, std::span<uint8_t> out) const override {
    return fail ? InternalError("read failed (test)") : inner_->ReadBlock(id, out);
  }
  Status WriteBlock(int32_t id, std::span<const uint8_t> in) override {
    return fail ? InternalError("write failed (test)") : inner_->WriteBlock(id, in);
  }
  std::atomic<bool> fail{false};

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(AdmissionTest, AFailedBlockMovementFailsItsRequestsNotTheProcess) {
  // Sliding-window chat sessions shift keys every few tokens; with the backend's moves
  // failing, those steps fail their requests (INTERNAL) and the engine carries on.
  const auto model = LoadModel("synthetic:tiny");
  EngineConfig config = TestConfig();
  config.chat_window_tokens = 48;
  config.chat_sink_tokens = 4;
  config.fault_cooldown_seconds = 0;
  BackendConfig backend_config = BackendConfigFor(config);
  backend_config.num_threads = 1;
  auto cpu = CreateBackend(backend_config, *model);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto backend = std::make_unique<FailingMoves>(std::move(*cpu));
  FailingMoves* moves = backend.get();
  auto engine = Engine::Create(config, model, std::move(backend));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  GenerationRequest r = Greedy({1, 2, 3, 4, 5}, 100);  // far past the 48-token window
  r.session_id = "windowed";
  moves->fail = true;
  const testing::RunResult failed = RunRequest(**engine, r);
  EXPECT_EQ(failed.status.code(), StatusCode::kInternal);
  // Stats are a snapshot published after the failed requests end.
  EXPECT_TRUE(WaitFor([&] { return (*engine)->GetStats().forward_errors_total > 0; }));
  moves->fail = false;
  r.session_id = "another";
  const testing::RunResult ok = RunRequest(**engine, r);
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString();
  EXPECT_EQ(ok.choices[0].tokens.size(), 100u);
  KvCacheStats stats;
  EXPECT_TRUE((*engine)->VerifyCacheIntegrity(10, &stats).ok());
}

}  // namespace admission_test
}  // namespace kvserve
