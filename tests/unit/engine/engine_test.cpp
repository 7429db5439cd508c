// The engine end to end on the real stories260K model: golden parity through Submit, chunked
// prefill, preemption, isolation, cancellation, stop strings, choices, errors.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace engine_test {

using testing::Collect;
using testing::Greedy;
using testing::MakeEngine;
using testing::RunRequest;
using testing::TestConfig;

struct Golden {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::string text;
};

std::vector<Golden> ReadGolden() {
  std::ifstream in(testing::SharedPath("golden/stories260K-greedy.jsonl"));
  std::vector<Golden> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j["prompt_tokens"].get<std::vector<int32_t>>(), j["tokens"].get<std::vector<int32_t>>(),
                   j["text"].get<std::string>()});
  }
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE("models/stories260K.gguf");
    REQUIRE_SHARED_FILE("golden/stories260K-greedy.jsonl");
    model_ = testing::Stories();
    golden_ = ReadGolden();
  }
  std::shared_ptr<const Model> model_;
  std::vector<Golden> golden_;
};

TEST_F(EngineTest, ConcurrentGreedyRequestsReproduceTheGoldens) {
  auto engine = MakeEngine(model_, TestConfig());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Golden& g : golden_) streams.push_back(*engine->Submit(Greedy(g.prompt, 48)));
  for (size_t i = 0; i < golden_.size(); ++i) {
    testing::RunResult r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.choices[0].tokens, golden_[i].tokens) << i;
    EXPECT_EQ(r.choices[0].text, golden_[i].text) << i;
    EXPECT_EQ(r.choices[0].finish, FinishReason::kLength);
    EXPECT_EQ(r.usage.prompt_tokens, static_cast<int>(golden_[i].prompt.size()));
    EXPECT_EQ(r.usage.completion_tokens, 48);
  }
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks == 0; }));
}

TEST_F(EngineTest, ChunkedPrefillGivesTheSameTokens) {
  EngineConfig config = TestConfig();
  config.max_num_batched_tokens = 5;  // every prompt is split into chunks of <= 5 tokens
  auto engine = MakeEngine(model_, config);
  for (const Golden& g : golden_) {
    testing::RunResult r = RunRequest(*engine, Greedy(g.prompt, 48));
    EXPECT_EQ(r.choices[0].tokens, g.tokens);
  }
}

// Compaction of old context: F32 blocks older than the newest 16 tokens re-encoded to F16
// every 16 tokens, under preemption too (a small pool). F16 keys and values move the logits
// by ~1e-3, below the goldens' closest calls, so the greedy tokens stay the goldens.
TEST_F(EngineTest, CompactedContextKeepsTheGoldens) {
  for (const int num_blocks : {256, 12}) {
    EngineConfig config = TestConfig(num_blocks);
    config.num_compact_blocks = 24;
    config.compact_dtype = KvDtype::kF16;
    config.compact_every_tokens = 16;
    config.compact_keep_tokens = 16;
    auto engine = MakeEngine(model_, config);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Golden& g : golden_) streams.push_back(*engine->Submit(Greedy(g.prompt, 48)));
    for (size_t i = 0; i < golden_.size(); ++i) {
      testing::RunResult r = Collect(*streams[i]);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(r.choices[0].tokens, golden_[i].tokens) << i << " with " << num_blocks << " blocks";
    }
    EXPECT_TRUE(testing::WaitFor([&] {
      const KvCacheStats st = engine->GetStats().cache;
      return st.used_blocks == 0 && st.compact_used_blocks == 0;
    }));
    const KvCacheStats st = engine->GetStats().cache;
    EXPECT_GT(st.compacted_blocks, 0);
    EXPECT_EQ(st.compact_total_blocks, 24);
    EXPECT_GT(st.bytes_by_dtype.at("f16"), 0);
  }
}

TEST_F(EngineTest, PreemptedRequestsResumeWithIdenticalOutput) {
  // 12 blocks of 16 tokens hold ~3 of these sequences (prompt + 48 tokens each): the rest
  // are admitted as blocks free up, and running ones get preempted when they cannot grow.
  EngineConfig config = TestConfig(12);
  config.enable_prefix_caching = false;
  auto engine = MakeEngine(model_, config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Golden& g : golden_) streams.push_back(*engine->Submit(Greedy(g.prompt, 48)));
  for (size_t i = 0; i < golden_.size(); ++i) {
    testing::RunResult r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.choices[0].tokens, golden_[i].tokens) << i;
  }
  EXPECT_TRUE(testing::WaitFor([&] {
    return engine->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kPreemption)] > 0;
  }));
  EXPECT_GT(engine->GetStats().preemptions_total, 0);
}

TEST_F(EngineTest, SwapPreemptionAlsoResumesIdentically) {
  EngineConfig config = TestConfig(12);
  config.enable_prefix_caching = false;
  config.preempt_by_swap = true;
  config.num_host_blocks = 64;
  auto engine = MakeEngine(model_, config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Golden& g : golden_) streams.push_back(*engine->Submit(Greedy(g.prompt, 48)));
  for (size_t i = 0; i < golden_.size(); ++i) EXPECT_EQ(Collect(*streams[i]).choices[0].tokens, golden_[i].tokens) << i;
  // Stats are published after each step: wait for the idle engine's final snapshot.
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().running + engine->GetStats().waiting == 0; }));
  EXPECT_TRUE(testing::WaitFor([&] {
    const EngineStats s = engine->GetStats();
    return s.cache.swapped_in_blocks == s.cache.swapped_out_blocks;
  }));
  const EngineStats stats = engine->GetStats();
  EXPECT_GT(stats.preemptions_total, 0);
  EXPECT_GT(stats.cache.swapped_out_blocks, 0);
}

TEST_F(EngineTest, ThirtyTwoConcurrentRequestsEachEqualTheirSoloRun) {
  const Tokenizer& tok = model_->tokenizer();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 32; ++i) {
    GenerationRequest r = Greedy(golden_[i % golden_.size()].prompt, 8 + (i * 7) % 40);
    if (i % 3 == 1) {  // seeded sampling: deterministic per request
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 1000 + i;
    }
    if (i % 4 == 2) r.sampling.repetition_penalty = 1.3f;
    if (i % 5 == 3) r.prompt_tokens = tok.Encode("A different prompt number " + std::to_string(i), true);
    requests.push_back(r);
  }
  auto engine = MakeEngine(model_, TestConfig());
  std::vector<std::vector<int32_t>> solo;
  for (const GenerationRequest& r : requests) solo.push_back(RunRequest(*engine, r).choices[0].tokens);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) streams.push_back(*engine->Submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(Collect(*streams[i]).choices[0].tokens, solo[i]) << "request " << i;
  }
}

TEST_F(EngineTest, AbortFreesTheRequestsBlocks) {
  auto engine = MakeEngine(model_, TestConfig());
  auto stream = *engine->Submit(Greedy(golden_[0].prompt, 1500));
  std::vector<StreamDelta> deltas;
  ASSERT_TRUE(stream->Next(&deltas));  // generating
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks > 0; }));
  engine->Abort(stream->id());
  testing::RunResult r = Collect(*stream);
  EXPECT_EQ(r.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(r.choices[0].finish, FinishReason::kAbort);
  EXPECT_LT(r.usage.completion_tokens, 1500);
  // The snapshot after the abort's step shows no used blocks.
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks == 0; }));
  EXPECT_TRUE(testing::WaitFor(
      [&] { return engine->GetStats().requests_total[static_cast<int>(RequestOutcome::kAborted)] == 1; }));
}

TEST_F(EngineTest, StopStringsSpanningTokensAreNeverEmitted) {
  auto engine = MakeEngine(model_, TestConfig());
  // Golden 0 continues ", there was a little girl named Lily. She loved ...".
  GenerationRequest r = Greedy(golden_[0].prompt, 48);
  r.sampling.stop = {"ittle gi", "never"};
  testing::RunResult out = RunRequest(*engine, r);
  EXPECT_EQ(out.choices[0].text, ", there was a l");
  EXPECT_EQ(out.choices[0].finish, FinishReason::kStop);
  EXPECT_EQ(out.choices[0].matched_stop, "ittle gi");
}

TEST_F(EngineTest, MaxTokensEosAndStopTokenIds) {
  auto engine = MakeEngine(model_, TestConfig());
  testing::RunResult out = RunRequest(*engine, Greedy(golden_[0].prompt, 5));
  EXPECT_EQ(out.choices[0].tokens, std::vector<int32_t>(golden_[0].tokens.begin(), golden_[0].tokens.begin() + 5));
  EXPECT_EQ(out.choices[0].finish, FinishReason::kLength);
  // Token 383 is the golden's 2nd token: as a stop token id it ends generation there.
  GenerationRequest r = Greedy(golden_[0].prompt, 48);
  r.sampling.stop_token_ids = {383};
  out = RunRequest(*engine, r);
  EXPECT_EQ(out.choices[0].tokens, (std::vector<int32_t>{432, 383}));
  EXPECT_EQ(out.choices[0].finish, FinishReason::kStop);
  // With EOS allowed, a long generation ends with EOS (id 2) before the limit.
  GenerationRequest eos = Greedy(golden_[0].prompt, 1000);
  eos.sampling.ignore_eos = false;
  out = RunRequest(*engine, eos);
  if (out.choices[0].finish == FinishReason::kStop) {
    EXPECT_EQ(out.choices[0].tokens.back(), 2);
  } else {
    EXPECT_EQ(out.choices[0].tokens.size(), 1000u);
  }
  EXPECT_EQ(RunRequest(*engine, Greedy(golden_[0].prompt, 0)).choices[0].finish, FinishReason::kLength);
}

TEST_F(EngineTest, ChoicesForkThePromptBlocks) {
  auto engine = MakeEngine(model_, TestConfig());
  GenerationRequest greedy = Greedy(golden_[1].prompt, 20);
  greedy.n = 3;
  testing::RunResult out = RunRequest(*engine, greedy);
  ASSERT_EQ(out.choices.size(), 3u);
  const std::vector<int32_t> want(golden_[1].tokens.begin(), golden_[1].tokens.begin() + 20);
  for (const auto& c : out.choices) EXPECT_EQ(c.tokens, want);
  EXPECT_EQ(out.usage.completion_tokens, 60);

  GenerationRequest sampled = greedy;
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  out = RunRequest(*engine, sampled);
  EXPECT_NE(out.choices[0].tokens, out.choices[1].tokens);
  EXPECT_EQ(RunRequest(*engine, sampled).choices[2].tokens, out.choices[2].tokens);  // seeded: repeatable
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.used_blocks == 0; }));
}

TEST_F(EngineTest, SubmitRejectsBadRequestsWithTheRightCodes) {
  EngineConfig config = TestConfig();
  config.max_queued_requests = 2;
  auto engine = MakeEngine(model_, config);
  EXPECT_EQ(engine->Submit(Greedy({}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(Greedy({1, 99999}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(Greedy({1, 2}, 5000)).status().code(), StatusCode::kOutOfRange);
  GenerationRequest bad = Greedy({1, 2}, 4);
  bad.sampling.top_p = 2;
  EXPECT_EQ(engine->Submit(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Greedy({1, 2}, 4);
  bad.n = 0;
  EXPECT_EQ(engine->Submit(bad).status().code(), StatusCode::kInvalidArgument);
  // A good request still works afterwards.
  EXPECT_EQ(RunRequest(*engine, Greedy(golden_[0].prompt, 3)).choices[0].tokens.size(), 3u);
}

TEST_F(EngineTest, DrainFinishesInFlightAndRefusesNew) {
  auto engine = MakeEngine(model_, TestConfig());
  auto stream = *engine->Submit(Greedy(golden_[0].prompt, 48));
  std::thread drainer([&] { EXPECT_EQ(engine->Drain(30), 0); });
  EXPECT_TRUE(testing::WaitFor([&] { return engine->Submit(Greedy(golden_[0].prompt, 2)).status().code() == StatusCode::kUnavailable; }));
  EXPECT_EQ(Collect(*stream).choices[0].tokens, golden_[0].tokens);
  drainer.join();
}

}  // namespace engine_test
}  // namespace kvserve
