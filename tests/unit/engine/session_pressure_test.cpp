// Chat sessions under memory pressure and client churn (issue 36's crash, stall, bound and
// lifecycle scenarios), on synthetic:tiny with small pools:
//   - aborting, or stopping the engine, while session requests are swapped to the host tier;
//   - a burst of turns from idle sessions whose caches fill the pool (waiting requests that
//     hold blocks give them up) and stats that stay current while nothing can run;
//   - idle sessions move to the host tier before their cache is dropped;
//   - stop-then-send: an abort is processed before the same session's next turn;
//   - windowed sessions keep limits on the prompt and on max_tokens.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace session_pressure_test {

using testing::Collect;
using testing::LoadModel;
using testing::MakeEngine;
using testing::RunRequest;
using testing::RunResult;
using testing::TestConfig;
using testing::WaitFor;

constexpr double kTimeout = 30;

std::vector<int32_t> Tokens(int first, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 3 + (first + i * 7) % 200;
  return t;
}

GenerationRequest Turn(const std::string& session, std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r = testing::Greedy(std::move(prompt), max_tokens);
  r.session_id = session;
  r.tenant = "key";
  return r;
}

// Collects every stream, failing (and stopping the engine, which ends them) when they do
// not all end within `seconds`: a stalled engine fails the test instead of hanging it.
std::vector<RunResult> CollectAll(Engine& engine, std::vector<std::shared_ptr<RequestStream>> streams,
                                  double seconds = 60) {
  std::vector<std::future<RunResult>> futures;
  for (auto& s : streams) futures.push_back(std::async(std::launch::async, [s] { return Collect(*s); }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  bool stalled = false;
  for (auto& f : futures) {
    if (f.wait_until(deadline) != std::future_status::ready) stalled = true;
  }
  const EngineStats stats = engine.GetStats();
  EXPECT_FALSE(stalled) << "requests did not finish within " << seconds << " s: running " << stats.running
                        << ", waiting " << stats.waiting << ", swapped " << stats.swapped << ", free blocks "
                        << stats.cache.free_blocks << ", steps " << stats.steps;
  if (stalled) engine.Stop();
  std::vector<RunResult> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

EngineConfig SwapConfig() {
  EngineConfig config = TestConfig(/*num_blocks=*/24);
  config.preempt_by_swap = true;
  config.num_host_blocks = 128;
  config.max_num_seqs = 8;
  return config;
}

// Eight session requests of 360 tokens in a pool of 24 blocks (384 tokens): some are swapped
// out all the time.
std::vector<std::shared_ptr<RequestStream>> SubmitSwappingTurns(Engine& engine) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    auto s = engine.Submit(Turn("s" + std::to_string(i), Tokens(i * 31, 20), 340));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) streams.push_back(*s);
  }
  EXPECT_TRUE(WaitFor([&] { return engine.GetStats().swapped >= 2; }, kTimeout)) << "nothing was swapped out";
  return streams;
}

TEST(SessionPressureTest, AbortingSwappedSessionRequestsKeepsTheProcessAndTheSessions) {
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), SwapConfig());
  std::vector<std::shared_ptr<RequestStream>> streams = SubmitSwappingTurns(*engine);
  for (auto& s : streams) engine->Abort(s->id());
  for (const RunResult& r : CollectAll(*engine, streams)) EXPECT_EQ(r.status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(engine->VerifyCacheIntegrity(kTimeout).ok());
  // Every session, swapped when its request was aborted or not, takes its next turn.
  for (int i = 0; i < 8; ++i) {
    const RunResult next = RunRequest(*engine, Turn("s" + std::to_string(i), Tokens(i * 31, 20), 4));
    EXPECT_TRUE(next.status.ok()) << next.status.ToString();
    EXPECT_GT(next.usage.cached_prompt_tokens, 0) << "session s" << i << " lost its cache";
  }
  EXPECT_TRUE(engine->VerifyCacheIntegrity(kTimeout).ok());
}

TEST(SessionPressureTest, StoppingWithSwappedSessionRequestsEndsEveryStream) {
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), SwapConfig());
  std::vector<std::shared_ptr<RequestStream>> streams = SubmitSwappingTurns(*engine);
  engine->Stop();
  for (const RunResult& r : CollectAll(*engine, streams)) EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
}

// Three sessions of 6 blocks each idle in a 20-block pool; their next turns arrive at once.
// Admission gives each its cache, so the waiting requests hold 18 blocks and the first needs
// more than the 2 left: a waiting holder gives its blocks up (freed, or swapped with
// `swap`) and every turn completes.
void BurstOfTurnsFromIdleSessions(bool swap) {
  EngineConfig config = TestConfig(/*num_blocks=*/20);
  config.preempt_by_swap = swap;
  config.num_host_blocks = swap ? 64 : 0;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  std::vector<std::vector<int32_t>> histories;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest first = Turn("s" + std::to_string(i), Tokens(i * 53, 80), 16);
    const RunResult r = RunRequest(*engine, first);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    std::vector<int32_t> h = first.prompt_tokens;
    h.insert(h.end(), r.choices[0].tokens.begin(), r.choices[0].tokens.end());
    histories.push_back(std::move(h));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = histories[static_cast<size_t>(i)];
    const std::vector<int32_t> more = Tokens(1000 + i, 40);
    prompt.insert(prompt.end(), more.begin(), more.end());
    auto s = engine->Submit(Turn("s" + std::to_string(i), prompt, 30));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    streams.push_back(*s);
  }
  for (const RunResult& r : CollectAll(*engine, streams)) {
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.usage.completion_tokens, 30);
  }
  EXPECT_GT(engine->GetStats().preemptions_total, 0) << "the scenario no longer fills the pool";
  EXPECT_TRUE(engine->VerifyCacheIntegrity(kTimeout).ok());
}

TEST(SessionPressureTest, ABurstOfTurnsFromIdleSessionsCompletesByRecompute) { BurstOfTurnsFromIdleSessions(false); }
TEST(SessionPressureTest, ABurstOfTurnsFromIdleSessionsCompletesBySwapping) { BurstOfTurnsFromIdleSessions(true); }

TEST(SessionPressureTest, StatsStayCurrentWhileNothingCanRun) {
  EngineConfig config = TestConfig(/*num_blocks=*/8);
  config.max_pinned_bytes = int64_t{1} << 40;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  // Pins hold 7 of the 8 blocks; a request that needs 3 waits until they are released.
  StatusOr<PinnedPrefix> pin = engine->PinPrefix(testing::Greedy(Tokens(1, 7 * 16), 0), kTimeout);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  auto stream = engine->Submit(testing::Greedy(Tokens(500, 40), 4));
  ASSERT_TRUE(stream.ok());
  EXPECT_TRUE(WaitFor([&] { return engine->GetStats().waiting == 1; }, kTimeout))
      << "the waiting request never shows in the stats";
  ASSERT_TRUE(engine->Unpin("", pin->id, kTimeout).ok());
  const std::vector<RunResult> done = CollectAll(*engine, {*stream});
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.ToString();
  EXPECT_TRUE(WaitFor([&] { return engine->GetStats().waiting == 0; }, kTimeout));
}

TEST(SessionPressureTest, IdleSessionsMoveToTheHostTierBeforeTheyAreDropped) {
  EngineConfig config = TestConfig(/*num_blocks=*/16);
  config.num_host_blocks = 64;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  GenerationRequest first = Turn("idle", Tokens(7, 100), 8);
  const RunResult r1 = RunRequest(*engine, first);
  ASSERT_TRUE(r1.status.ok());
  // A request that needs nearly the whole pool pushes the idle session out of device memory.
  ASSERT_TRUE(RunRequest(*engine, testing::Greedy(Tokens(900, 200), 40)).status.ok());
  std::vector<int32_t> prompt = first.prompt_tokens;
  prompt.insert(prompt.end(), r1.choices[0].tokens.begin(), r1.choices[0].tokens.end());
  const std::vector<int32_t> more = Tokens(77, 10);
  prompt.insert(prompt.end(), more.begin(), more.end());
  const RunResult r2 = RunRequest(*engine, Turn("idle", prompt, 4));
  ASSERT_TRUE(r2.status.ok());
  EXPECT_EQ(r2.usage.cached_prompt_tokens, 100 + 8 - 1) << "the session's cache was dropped, not offloaded";
}

TEST(SessionPressureTest, StopThenSendFindsTheSessionFree) {
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), TestConfig());
  for (int i = 0; i < 10; ++i) {
    auto running = engine->Submit(Turn("chat", Tokens(i, 30), 1500));
    ASSERT_TRUE(running.ok());
    std::vector<StreamDelta> deltas;
    ASSERT_TRUE((*running)->Next(&deltas));  // streaming
    engine->Abort((*running)->id());
    const RunResult next = RunRequest(*engine, Turn("chat", Tokens(i, 40), 2));
    EXPECT_TRUE(next.status.ok()) << "try " << i << ": " << next.status.ToString();
    Collect(**running);
  }
}

TEST(SessionPressureTest, ATurnWaitsForItsSessionsRequestToEnd) {
  EngineConfig config = TestConfig();
  config.session_busy_wait_seconds = 30;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  auto running = engine->Submit(Turn("chat", Tokens(1, 30), 300));
  ASSERT_TRUE(running.ok());
  auto next = engine->Submit(Turn("chat", Tokens(1, 40), 2));
  ASSERT_TRUE(next.ok());
  const std::vector<RunResult> results = CollectAll(*engine, {*running, *next});
  EXPECT_TRUE(results[0].status.ok()) << results[0].status.ToString();
  EXPECT_TRUE(results[1].status.ok()) << results[1].status.ToString();
  EXPECT_EQ(results[0].usage.completion_tokens, 300);
  EXPECT_GT(results[1].usage.cached_prompt_tokens, 0) << "the waiting turn did not get the session's cache";
}

TEST(SessionPressureTest, AConcurrentTurnOfABusySessionFailsWhenItMayNotWait) {
  EngineConfig config = TestConfig();
  config.session_busy_wait_seconds = 0;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  auto running = engine->Submit(Turn("chat", Tokens(1, 30), 2000));
  ASSERT_TRUE(running.ok());
  const RunResult second = RunRequest(*engine, Turn("chat", Tokens(1, 40), 2));
  EXPECT_EQ(second.status.code(), StatusCode::kFailedPrecondition) << second.status.ToString();
  engine->Abort((*running)->id());
  Collect(**running);
}

TEST(SessionPressureTest, WindowedSessionsKeepPromptAndCompletionLimits) {
  EngineConfig config = TestConfig();
  config.max_model_len = 256;
  config.chat_window_tokens = 128;
  config.chat_max_prompt_tokens = 1000;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  EXPECT_EQ(engine->Submit(Turn("w", Tokens(1, 1001), 4)).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(engine->Submit(Turn("w", Tokens(1, 20), 257)).status().code(), StatusCode::kOutOfRange);
  // Past max_model_len but within the prompt limit: the window makes room.
  const RunResult long_history = RunRequest(*engine, Turn("w", Tokens(1, 600), 8));
  EXPECT_TRUE(long_history.status.ok()) << long_history.status.ToString();
  EXPECT_EQ(long_history.usage.completion_tokens, 8);
}

}  // namespace session_pressure_test
}  // namespace kvserve
