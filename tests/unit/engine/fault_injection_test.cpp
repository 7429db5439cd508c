// Test hooks of the engine used by the reliability tests: EngineTestHooks::fail_forward
// (a failing forward pass fails exactly the requests of that batch; three in a row make the
// engine unhealthy) and Engine::VerifyCacheIntegrity (runs on the engine thread, returns the
// cache snapshot of the same moment).
#include <gtest/gtest.h>

#include <atomic>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace fault_injection_test {

using testing::Collect;
using testing::LoadModel;
using testing::MakeEngine;
using testing::TestConfig;

GenerationRequest Greedy(int max_tokens) {
  GenerationRequest r;
  r.prompt_tokens = {1, 300, 301, 302};
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(FaultInjectionTest, OneFailingPassFailsOnlyItsBatch) {
  EngineConfig config = TestConfig();
  config.max_num_seqs = 1;  // one request per pass: the second one waits outside the batch
  std::atomic<int64_t> seen{-1};
  config.test_hooks.fail_forward = [&](int64_t pass) {
    seen = pass;
    return pass == 3;
  };
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  auto first = engine->Submit(Greedy(8));
  auto second = engine->Submit(Greedy(8));
  ASSERT_TRUE(first.ok() && second.ok());
  const testing::RunResult a = Collect(**first);
  const testing::RunResult b = Collect(**second);
  EXPECT_EQ(a.status.code(), StatusCode::kInternal);
  EXPECT_EQ(a.status.message(), "the forward pass failed for this batch");  // no internals
  EXPECT_EQ(a.choices[0].tokens.size(), 3u);  // passes 0, 1, 2 produced a token each
  EXPECT_TRUE(b.status.ok()) << b.status.ToString();
  EXPECT_EQ(b.choices[0].tokens.size(), 8u);
  EXPECT_TRUE(engine->Healthy());
  KvCacheStats stats;
  ASSERT_TRUE(engine->VerifyCacheIntegrity(10, &stats).ok());
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().forward_errors_total == 1; }));
  EXPECT_GE(seen.load(), 3);
}

TEST(FaultInjectionTest, ThreeFailuresInARowMakeTheEngineUnhealthy) {
  EngineConfig config = TestConfig();
  config.test_hooks.fail_forward = [](int64_t pass) { return pass >= 1; };
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), config);
  ASSERT_TRUE(Collect(**engine->Submit(Greedy(1))).status.ok());  // pass 0
  for (int i = 0; i < 3; ++i) {
    auto s = engine->Submit(Greedy(4));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(Collect(**s).status.code(), StatusCode::kInternal);
  }
  EXPECT_FALSE(engine->Healthy());
  EXPECT_EQ(engine->Submit(Greedy(1)).status().code(), StatusCode::kUnavailable);
  KvCacheStats stats;
  EXPECT_TRUE(engine->VerifyCacheIntegrity(10, &stats).ok());
  EXPECT_EQ(stats.used_blocks, 0);
}

TEST(VerifyCacheIntegrityTest, RunsWhileRequestsAreInFlightAndAfterStop) {
  auto engine = MakeEngine(LoadModel("synthetic:tiny"), TestConfig());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) streams.push_back(*engine->Submit(Greedy(64)));
  for (int i = 0; i < 20; ++i) {
    KvCacheStats stats;
    ASSERT_TRUE(engine->VerifyCacheIntegrity(10, &stats).ok());
    EXPECT_EQ(stats.total_blocks, 256);
  }
  for (auto& s : streams) EXPECT_TRUE(Collect(*s).status.ok());
  KvCacheStats stats;
  ASSERT_TRUE(engine->VerifyCacheIntegrity(10, &stats).ok());
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_GT(stats.cached_blocks, 0);  // the shared prompt's full blocks stay cached
  engine->Stop();
  EXPECT_EQ(engine->VerifyCacheIntegrity(1).code(), StatusCode::kUnavailable);
}

}  // namespace fault_injection_test
}  // namespace kvserve
