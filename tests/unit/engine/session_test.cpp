// Chat sessions: a new turn reuses the stored cache, gives the same tokens as a fresh run,
// sliding windows keep long sessions going, limits evict least recently used sessions.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace session_test {

using testing::Greedy;
using testing::MakeEngine;
using testing::RunRequest;
using testing::TestConfig;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE("models/stories260K.gguf");
    model_ = testing::Stories();
  }
  std::vector<int32_t> Encode(const std::string& text, bool bos) { return model_->tokenizer().Encode(text, bos); }
  std::shared_ptr<const Model> model_;
};

TEST_F(SessionTest, SecondTurnPrefillsOnlyItsNewTokens) {
  auto engine = MakeEngine(model_, TestConfig());
  GenerationRequest turn1 = Greedy(Encode("Once upon a time", true), 20);
  turn1.session_id = "chat-1";
  testing::RunResult r1 = RunRequest(*engine, turn1);
  ASSERT_TRUE(r1.status.ok());
  EXPECT_EQ(r1.usage.cached_prompt_tokens, 0);
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 1; }));

  // Turn 2 repeats the history (prompt + answer) and adds a new user line.
  std::vector<int32_t> history = turn1.prompt_tokens;
  history.insert(history.end(), r1.choices[0].tokens.begin(), r1.choices[0].tokens.end());
  std::vector<int32_t> turn2_prompt = history;
  for (int32_t t : Encode(" Then the dog said hello.", false)) turn2_prompt.push_back(t);
  GenerationRequest turn2 = Greedy(turn2_prompt, 20);
  turn2.session_id = "chat-1";
  testing::RunResult r2 = RunRequest(*engine, turn2);
  ASSERT_TRUE(r2.status.ok());
  // The cache held the prompt and all generated tokens but the last (never computed).
  EXPECT_EQ(r2.usage.cached_prompt_tokens, static_cast<int>(history.size()) - 1);

  // Same tokens as a fresh engine without sessions or prefix cache.
  EngineConfig fresh = TestConfig();
  fresh.enable_prefix_caching = false;
  auto other = MakeEngine(model_, fresh);
  EXPECT_EQ(RunRequest(*other, Greedy(turn2_prompt, 20)).choices[0].tokens, r2.choices[0].tokens);
}

TEST_F(SessionTest, DivergingHistoryReusesOnlyTheCommonPrefix) {
  auto engine = MakeEngine(model_, TestConfig());
  GenerationRequest turn1 = Greedy(Encode("Once upon a time, there was a big dog named Max", true), 4);
  turn1.session_id = "s";
  ASSERT_TRUE(RunRequest(*engine, turn1).status.ok());
  GenerationRequest edited = Greedy(Encode("Once upon a time, there was a cat", true), 4);
  edited.session_id = "s";
  testing::RunResult r = RunRequest(*engine, edited);
  const auto a = turn1.prompt_tokens, b = edited.prompt_tokens;
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  EXPECT_EQ(r.usage.cached_prompt_tokens, static_cast<int>(common));
  EXPECT_EQ(RunRequest(*MakeEngine(model_, TestConfig()), Greedy(b, 4)).choices[0].tokens, r.choices[0].tokens);
}

TEST_F(SessionTest, BusySessionIsRefusedAndOthersContinue) {
  auto engine = MakeEngine(model_, TestConfig());
  GenerationRequest long_turn = Greedy(Encode("Once upon a time", true), 1000);
  long_turn.session_id = "busy";
  auto first = *engine->Submit(long_turn);
  std::vector<StreamDelta> d;
  ASSERT_TRUE(first->Next(&d));
  GenerationRequest second = Greedy(Encode("Hello", true), 2);
  second.session_id = "busy";
  testing::RunResult r = RunRequest(*engine, second);
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  engine->Abort(first->id());
  EXPECT_EQ(testing::Collect(*first).status.code(), StatusCode::kCancelled);
  // After the abort the session holds what was computed and accepts the next turn.
  EXPECT_TRUE(RunRequest(*engine, second).status.ok());
}

TEST_F(SessionTest, EachTenantHasItsOwnNamespace) {
  auto engine = MakeEngine(model_, TestConfig());
  auto turn = [&](const std::string& tenant, std::vector<int32_t> prompt, int max_tokens) {
    GenerationRequest r = Greedy(std::move(prompt), max_tokens);
    r.session_id = "shared-name";
    r.tenant = tenant;
    r.cache_salt = tenant;  // as the RequestBuilder salts per tenant
    return r;
  };
  const std::vector<int32_t> prompt = Encode("Once upon a time", true);
  testing::RunResult a1 = RunRequest(*engine, turn("A", prompt, 12));
  ASSERT_TRUE(a1.status.ok());
  // B names the same session: it gets one of its own (never NOT_FOUND: no oracle), which
  // holds nothing of A's.
  testing::RunResult b1 = RunRequest(*engine, turn("B", prompt, 12));
  ASSERT_TRUE(b1.status.ok()) << b1.status.ToString();
  EXPECT_EQ(b1.usage.cached_prompt_tokens, 0);
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 2; }));
  // While A's next turn runs, B's session of that name is not busy; B's drop leaves A's.
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), a1.choices[0].tokens.begin(), a1.choices[0].tokens.end());
  auto a2 = *engine->Submit(turn("A", history, 500));
  std::vector<StreamDelta> d;
  ASSERT_TRUE(a2->Next(&d));
  EXPECT_TRUE(RunRequest(*engine, turn("B", prompt, 2)).status.ok());
  EXPECT_TRUE(engine->EndSession("B", "shared-name", 10).ok());
  EXPECT_EQ(engine->EndSession("C", "shared-name", 10).code(), StatusCode::kNotFound);
  const testing::RunResult a2_result = testing::Collect(*a2);
  ASSERT_TRUE(a2_result.status.ok());
  EXPECT_EQ(a2_result.usage.cached_prompt_tokens, static_cast<int>(history.size()) - 1);
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 1; }));
}

TEST_F(SessionTest, SessionIdsAreBoundedAndNeverEchoed) {
  auto engine = MakeEngine(model_, TestConfig());
  GenerationRequest r = Greedy(Encode("Hello", true), 2);
  r.session_id = std::string(kMaxSessionIdBytes + 1, 'x');
  const auto refused = engine->Submit(r);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().find("xxxx"), std::string::npos) << refused.status().message();
  r.session_id = std::string(kMaxSessionIdBytes, 'y');
  EXPECT_TRUE(RunRequest(*engine, r).status.ok());
  // The busy error does not echo the id either.
  GenerationRequest long_turn = Greedy(Encode("Once upon a time", true), 1000);
  long_turn.session_id = "secret-id-123";
  auto first = *engine->Submit(long_turn);
  std::vector<StreamDelta> d;
  ASSERT_TRUE(first->Next(&d));
  GenerationRequest second = Greedy(Encode("Hello", true), 2);
  second.session_id = "secret-id-123";
  const testing::RunResult busy = RunRequest(*engine, second);
  EXPECT_EQ(busy.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.status.message().find("secret-id-123"), std::string::npos) << busy.status.message();
  engine->Abort(first->id());
}

TEST_F(SessionTest, SlidingWindowKeepsALongSessionGoing) {
  EngineConfig config = TestConfig(16);  // 256 positions in the whole pool
  config.chat_window_tokens = 128;
  config.chat_sink_tokens = 4;
  auto engine = MakeEngine(model_, config);
  // 10x the model's 128-token training window, far beyond the pool.
  GenerationRequest r = Greedy(Encode("Once upon a time", true), 1280);
  r.session_id = "long";
  testing::RunResult out = RunRequest(*engine, r);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.choices[0].tokens.size(), 1280u);
  EXPECT_TRUE(testing::WaitFor(
      [&] { return engine->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kWindow)] > 0; }));
  const EngineStats stats = engine->GetStats();
  // The window never holds more than 128 positions + one block being filled.
  EXPECT_LE(stats.cache.used_blocks, 128 / 16 + 1);
}

TEST_F(SessionTest, SessionLimitsDropTheLeastRecentlyUsed) {
  EngineConfig config = TestConfig();
  config.max_sessions = 2;
  auto engine = MakeEngine(model_, config);
  for (const char* id : {"a", "b", "c"}) {
    GenerationRequest r = Greedy(Encode("Once upon a time", true), 4);
    r.session_id = id;
    ASSERT_TRUE(RunRequest(*engine, r).status.ok());
  }
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 2; }));
  EXPECT_TRUE(testing::WaitFor(
      [&] { return engine->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kSession)] > 0; }));
  EXPECT_TRUE(engine->EndSession("", "b", 10).ok());
  EXPECT_TRUE(engine->EndSession("", "c", 10).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 0; }));
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks == 0; }));
}

TEST_F(SessionTest, IdleSessionsGiveUpTheirCacheUnderMemoryPressure) {
  auto engine = MakeEngine(model_, TestConfig(8));  // 128 positions
  GenerationRequest s = Greedy(Encode("Once upon a time", true), 60);
  s.session_id = "idle";
  ASSERT_TRUE(RunRequest(*engine, s).status.ok());
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks > 0; }));
  // A request that needs the whole pool takes the idle session's blocks.
  testing::RunResult big = RunRequest(*engine, Greedy(Encode("One day", true), 120));
  ASSERT_TRUE(big.status.ok()) << big.status.ToString();
  EXPECT_EQ(big.choices[0].tokens.size(), 120u);
  EXPECT_TRUE(testing::WaitFor(
      [&] { return engine->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kSession)] > 0; }));
}

// SnapshotCache (the console's block map): a running request's sequence and, once it ends,
// its idle chat session are named as the holders of exactly the blocks the map gives them.
TEST_F(SessionTest, TheCacheSnapshotNamesTheRequestAndThenItsIdleSession) {
  EngineConfig config = TestConfig();
  // Each forward pass takes at least a millisecond, so the request is still running when the
  // snapshot runs (between two steps).
  config.test_hooks.fail_forward = [](int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return false;
  };
  auto engine = MakeEngine(model_, config);
  GenerationRequest turn = Greedy(Encode("Once upon a time", true), 300);
  turn.session_id = "chat-9";
  turn.tenant = "tenant-a";
  StatusOr<std::shared_ptr<RequestStream>> stream = engine->Submit(turn);
  ASSERT_TRUE(stream.ok());
  std::vector<StreamDelta> deltas;
  ASSERT_TRUE((*stream)->Next(&deltas));  // the first token: prefill is done
  StatusOr<CacheSnapshot> snap = engine->SnapshotCache(10);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  ASSERT_EQ(snap->owners.size(), 1u);
  const CacheOwner& running = snap->owners[0];
  EXPECT_EQ(running.kind, CacheOwner::Kind::kRequest);
  EXPECT_EQ(running.request_id, (*stream)->id());
  EXPECT_EQ(running.state, "running");
  EXPECT_EQ(running.session_id, "chat-9");
  EXPECT_EQ(running.tenant, "tenant-a");
  const KvBlockMap& map = snap->blocks;
  EXPECT_EQ(map.num_blocks(), config.num_blocks);
  // The prompt at least (the token just sampled enters the cache at the next step).
  EXPECT_GE(map.seqs[0].num_tokens, static_cast<int>(turn.prompt_tokens.size()));
  int held = 0;
  for (int b = 0; b < map.num_blocks(); ++b) held += map.holder[static_cast<size_t>(b)] == 0;
  EXPECT_EQ(held, map.seqs[0].num_blocks);
  EXPECT_EQ(map.count(BlockState::kUsed) + map.count(BlockState::kShared), held);
  EXPECT_FALSE(snap->kv_dtype.empty());
  EXPECT_GT(snap->stats.cache.block_bytes, 0);

  while ((*stream)->Next(&deltas)) {
  }
  ASSERT_TRUE((*stream)->status().ok());
  ASSERT_TRUE(testing::WaitFor([&] { return engine->GetStats().chat_sessions == 1; }));
  snap = engine->SnapshotCache(10);
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->owners.size(), 1u);
  EXPECT_EQ(snap->owners[0].kind, CacheOwner::Kind::kSession);
  EXPECT_EQ(snap->owners[0].session_id, "chat-9");
  EXPECT_EQ(snap->owners[0].tenant, "tenant-a");
  EXPECT_EQ(snap->owners[0].state, "idle");
  EXPECT_EQ(snap->blocks.seqs[0].num_tokens, static_cast<int>(turn.prompt_tokens.size()) + 300 - 1);
}

}  // namespace session_test
}  // namespace kvserve
