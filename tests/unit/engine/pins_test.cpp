// Pinned prefixes through the engine (Engine::PinPrefix / ListPins / Unpin): a pinned prompt's
// blocks survive cache pressure that evicts everything else, later requests that start with
// it skip its prefill (cached_prompt_tokens), the pinned-memory limit refuses a pin that
// would pass it, tenants only see and remove their own pins, and bad pins get clear errors.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace pins_test {

using testing::Greedy;
using testing::LoadModel;
using testing::MakeEngine;
using testing::RunRequest;
using testing::RunResult;
using testing::TestConfig;

constexpr double kTimeout = 30;

std::vector<int32_t> Tokens(int first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (first + i * 7) % 200;
  return t;
}

GenerationRequest PinRequest(std::vector<int32_t> prompt, std::string tenant = "", std::string salt = "") {
  GenerationRequest r = Greedy(std::move(prompt), 0);
  r.tenant = std::move(tenant);
  r.cache_salt = std::move(salt);
  return r;
}

TEST(PinsTest, PinnedPromptSurvivesPressureAndIsReused) {
  EngineConfig config = TestConfig(/*num_blocks=*/24);
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  const std::vector<int32_t> system = Tokens(1, 40);  // 2 whole blocks + 8 tokens
  StatusOr<PinnedPrefix> pin = engine->PinPrefix(PinRequest(system), kTimeout);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(pin->id, "pin-1");
  EXPECT_EQ(pin->prompt_tokens, 40);
  EXPECT_EQ(pin->pinned_tokens, 32);
  KvCacheStats stats;
  ASSERT_TRUE(engine->VerifyCacheIntegrity(kTimeout, &stats).ok());
  EXPECT_EQ(stats.pinned_blocks, 2);
  EXPECT_EQ(pin->bytes, 2 * stats.block_bytes);

  // Distinct prompts that need every other block, several times over: LRU eviction takes all
  // cached blocks but the pinned ones.
  for (int i = 0; i < 6; ++i) {
    const RunResult r = RunRequest(*engine, Greedy(Tokens(1000 + 97 * i, 300), 4));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  }
  std::vector<int32_t> prompt = system;
  for (int32_t t : Tokens(500, 9)) prompt.push_back(t);
  const RunResult reused = RunRequest(*engine, Greedy(prompt, 4));
  ASSERT_TRUE(reused.status.ok());
  EXPECT_EQ(reused.usage.cached_prompt_tokens, 32);

  // Unpinned, the same pressure evicts it.
  ASSERT_TRUE(engine->Unpin("", pin->id, kTimeout).ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(RunRequest(*engine, Greedy(Tokens(3000 + 89 * i, 300), 4)).status.ok());
  EXPECT_EQ(RunRequest(*engine, Greedy(prompt, 4)).usage.cached_prompt_tokens, 0);
}

TEST(PinsTest, LimitTenantsAndErrors) {
  EngineConfig config = TestConfig(/*num_blocks=*/64);
  auto probe = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  KvCacheStats stats;
  ASSERT_TRUE(probe->VerifyCacheIntegrity(kTimeout, &stats).ok());
  probe->Stop();
  config.max_pinned_bytes = 3 * stats.block_bytes;
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), config);

  StatusOr<PinnedPrefix> a = engine->PinPrefix(PinRequest(Tokens(1, 32), "alice"), kTimeout);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // Two more blocks would make four: over the limit, and nothing stays pinned.
  StatusOr<PinnedPrefix> b = engine->PinPrefix(PinRequest(Tokens(2, 32), "bob"), kTimeout);
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted) << b.status().ToString();
  // The same prompt pinned again holds the same blocks: no more memory.
  StatusOr<PinnedPrefix> again = engine->PinPrefix(PinRequest(Tokens(1, 32), "alice"), kTimeout);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE(again->id, a->id);

  StatusOr<PinList> alice = engine->ListPins("alice", kTimeout);
  ASSERT_TRUE(alice.ok());
  ASSERT_EQ(alice->pins.size(), 2u);
  EXPECT_EQ(alice->pinned_bytes, 2 * stats.block_bytes);
  EXPECT_EQ(alice->max_pinned_bytes, 3 * stats.block_bytes);
  EXPECT_TRUE(engine->ListPins("bob", kTimeout)->pins.empty());
  EXPECT_EQ(engine->Unpin("bob", a->id, kTimeout).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->Unpin("alice", "pin-x", kTimeout).code(), StatusCode::kNotFound);
  EXPECT_TRUE(engine->Unpin("alice", a->id, kTimeout).ok());
  EXPECT_EQ(engine->Unpin("alice", a->id, kTimeout).code(), StatusCode::kNotFound);

  // A different salt is another cache domain: its blocks are its own.
  StatusOr<PinnedPrefix> salted = engine->PinPrefix(PinRequest(Tokens(1, 16), "alice", "s"), kTimeout);
  ASSERT_TRUE(salted.ok()) << salted.status().ToString();
  EXPECT_EQ(engine->ListPins("alice", kTimeout)->pinned_bytes, 3 * stats.block_bytes);

  EXPECT_EQ(engine->PinPrefix(PinRequest(Tokens(1, 15)), kTimeout).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest session = PinRequest(Tokens(1, 32));
  session.session_id = "s1";
  EXPECT_EQ(engine->PinPrefix(session, kTimeout).status().code(), StatusCode::kInvalidArgument);
  KvCacheStats after;
  ASSERT_TRUE(engine->VerifyCacheIntegrity(kTimeout, &after).ok());
  EXPECT_EQ(after.pinned_blocks, 3);
}

// A pin whose caller goes away (the predicate gRPC passes for a cancelled call) aborts its
// prefill: CANCELLED, nothing pinned, its blocks back in the pool within a step.
TEST(PinsTest, CancelledPinAbortsItsPrefill) {
  auto engine = MakeEngine(LoadModel("synthetic:tiny:f32"), TestConfig(/*num_blocks=*/64));
  int polls = 0;
  StatusOr<PinnedPrefix> pin = engine->PinPrefix(PinRequest(Tokens(1, 200)), kTimeout, [&] {
    ++polls;
    return true;
  });
  EXPECT_EQ(pin.status().code(), StatusCode::kCancelled) << pin.status().ToString();
  EXPECT_EQ(polls, 1);
  EXPECT_TRUE(engine->ListPins("", kTimeout)->pins.empty());
  KvCacheStats stats;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(engine->VerifyCacheIntegrity(kTimeout, &stats).ok());
    if (stats.used_blocks == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_EQ(stats.pinned_blocks, 0);
}

TEST(PinsTest, OffWithoutPrefixCachingOrWithAZeroLimit) {
  EngineConfig config = TestConfig(32);
  config.enable_prefix_caching = false;
  auto no_cache = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  EXPECT_EQ(no_cache->PinPrefix(PinRequest(Tokens(1, 32)), kTimeout).status().code(),
            StatusCode::kFailedPrecondition);
  config.enable_prefix_caching = true;
  config.max_pinned_bytes = 0;
  auto off = MakeEngine(LoadModel("synthetic:tiny:f32"), config);
  EXPECT_EQ(off->PinPrefix(PinRequest(Tokens(1, 32)), kTimeout).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace pins_test
}  // namespace kvserve
