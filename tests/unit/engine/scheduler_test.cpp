// Scheduler against a real KvCacheManager, with no model: admission under the token,
// sequence and KV budgets (in order, chunking the prompt that reaches the token budget,
// after the cached prefix), aging bounds every wait, the running set and the logits rows
// stay within max_num_seqs, preemption takes the lowest priority then the latest arrival,
// swapped sequences come back before new ones, a forked choice (n > 1) keeps its cache
// while it waits, and the byte movements of a step come in an order that is safe to run
// (a sequence's window copies and key shifts before its own swap-out; nothing for a
// sequence whose blocks were freed).
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <numeric>
#include <vector>

namespace kvserve {
namespace scheduler_test {

constexpr int kBlock = 4;

KvSpec Spec() {
  KvSpecConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.block_size = kBlock;
  return *KvSpec::Create(c);
}

KvCacheManagerConfig CacheConfig(int num_blocks, int host_blocks = 0) {
  KvCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.num_host_blocks = host_blocks;
  c.test_hooks.verify_each_operation = true;
  return c;
}

std::vector<int32_t> Tokens(int first, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Requests and their single sequences, owned by the test (the engine's role).
class Requests {
 public:
  Sequence* Add(int num_tokens, int priority = 0, double waited_seconds = 0) {
    auto r = std::make_unique<Request>();
    r->id = r->arrival = requests_.size();
    r->params.priority = priority;
    r->submitted = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(waited_seconds));
    auto s = std::make_unique<Sequence>();
    s->id = next_seq_id_++;
    s->request = r.get();
    s->tokens = Tokens(static_cast<int>(1000 * requests_.size()), num_tokens);
    s->prompt_len = num_tokens;
    r->seqs.push_back(std::move(s));
    requests_.push_back(std::move(r));
    return requests_.back()->seqs[0].get();
  }
  // Another choice (n > 1) of first's request, with first's prompt.
  Sequence* AddChoice(Sequence* first) {
    Request* r = first->request;
    auto s = std::make_unique<Sequence>();
    s->id = next_seq_id_++;
    s->request = r;
    s->choice = static_cast<int>(r->seqs.size());
    s->tokens = first->tokens;
    s->prompt_len = first->prompt_len;
    r->seqs.push_back(std::move(s));
    return r->seqs.back().get();
  }

 private:
  std::vector<std::unique_ptr<Request>> requests_;
  SeqId next_seq_id_ = 100;
};

// What the engine does after a step: the scheduled tokens are computed.
void Advance(const SchedulerOutput& out) {
  for (const ScheduledWork& w : out.work) w.seq->num_computed += w.num_new_tokens;
}

SchedulerConfig Config(int max_num_seqs, int max_tokens) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_tokens;
  return c;
}

TEST(SchedulerTest, AgingRunsAnyRequestThatWaitedTheHorizonFirst) {
  KvCacheManager cache(Spec(), CacheConfig(64));
  SchedulerConfig config = Config(1, 64);
  config.aging_horizon_seconds = 60;
  Scheduler scheduler(config, &cache, nullptr);
  Requests requests;
  // Priorities far outside the range are clamped: INT_MIN is no better than kMinPriority.
  Sequence* old_low = requests.Add(8, INT_MAX, /*waited_seconds=*/61);
  Sequence* new_high = requests.Add(8, INT_MIN);
  Sequence* new_mid = requests.Add(8, 0);
  for (Sequence* s : {new_high, new_mid, old_low}) scheduler.AddWaiting(s);
  SchedulerOutput out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 1u);  // one sequence at a time
  EXPECT_EQ(out.work[0].seq, old_low);
  // Without the wait, priority order holds (lower first).
  Requests fresh;
  KvCacheManager cache2(Spec(), CacheConfig(64));
  Scheduler scheduler2(config, &cache2, nullptr);
  Sequence* low = fresh.Add(8, 5, /*waited_seconds=*/10);  // 10 s buys 5 * 200 / 60 = 33 levels
  Sequence* high = fresh.Add(8, -40);
  scheduler2.AddWaiting(low);
  scheduler2.AddWaiting(high);
  out = scheduler2.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, high);
}

TEST(SchedulerTest, LogitsRowsAndRunningSetStayWithinMaxNumSeqs) {
  KvCacheManager cache(Spec(), CacheConfig(64));
  Scheduler scheduler(Config(2, 64), &cache, nullptr);
  Requests requests;
  std::vector<Sequence*> seqs;
  for (int i = 0; i < 4; ++i) scheduler.AddWaiting(seqs.emplace_back(requests.Add(6)));
  SchedulerOutput out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.num_logits, 2);
  for (const ScheduledWork& w : out.work) EXPECT_EQ(w.num_logits, 1);  // prompt done: one row
  EXPECT_FALSE(scheduler.has_running_room());
  Advance(out);
  // A chunk that stops short of the end wants no row.
  Requests more;
  KvCacheManager cache2(Spec(), CacheConfig(64));
  Scheduler chunked(Config(2, 4), &cache2, nullptr);
  chunked.AddWaiting(more.Add(10));
  out = chunked.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].num_new_tokens, 4);
  EXPECT_EQ(out.work[0].num_logits, 0);
}

TEST(SchedulerTest, PromptLogprobsTakeOneRowPerPositionAndAreChunkedToTheRows) {
  KvCacheManager cache(Spec(), CacheConfig(64));
  Scheduler scheduler(Config(3, 64), &cache, nullptr);
  Requests requests;
  Sequence* scored = requests.Add(8);
  scored->wants_prompt_logprobs = true;
  scored->num_prompt_logprobs = 1;  // token 0 has no logprob
  Sequence* plain = requests.Add(5);
  scheduler.AddWaiting(scored);
  scheduler.AddWaiting(plain);
  // Three rows: the scored prompt gets positions 0..2 (rows for tokens 1..3); nothing is left
  // for the plain prompt's last position, so it stops one token short of it.
  SchedulerOutput out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.work[0].seq, scored);
  EXPECT_EQ(out.work[0].num_new_tokens, 3);
  EXPECT_EQ(out.work[0].num_logits, 3);
  EXPECT_EQ(out.work[1].seq, plain);
  EXPECT_EQ(out.work[1].num_new_tokens, 4);
  EXPECT_EQ(out.work[1].num_logits, 0);
  EXPECT_EQ(out.num_logits, 3);
  // Prompt logprobs never read the prefix cache (every position needs its logits).
  EXPECT_FALSE(scored->reads_prefix_cache());
}

// W (priority 0) has published 3 full blocks; V (priority 1, sliding window of 16 tokens, 4
// sinks) shares them through a prefix hit and owns a fourth. One block is free. V's next
// token overflows its window: evicting its block 1 keeps the shared block 2, which gets a
// private copy (the last free block) and re-rotated keys; then V's new token finds no block,
// and V, the lowest priority, is preempted in the same step.
struct WindowPreemptionScene {
  explicit WindowPreemptionScene(bool swap) : cache(Spec(), CacheConfig(6, /*host_blocks=*/16)) {
    SchedulerConfig config = Config(4, 64);
    config.preempt_by_swap = swap;
    scheduler = std::make_unique<Scheduler>(config, &cache, nullptr);
    w = requests.Add(14, /*priority=*/0);
    v = requests.Add(17, /*priority=*/1);
    std::copy_n(w->tokens.begin(), 12, v->tokens.begin());  // V's first 12 tokens are W's
    EXPECT_TRUE(cache.AllocateSlots(w->id, 13).has_value());
    cache.CommitComputed(w->id, w->tokens, 13, "");
    w->num_computed = 13;
    EXPECT_EQ(cache.AcquireCachedPrefix(v->id, v->tokens, ""), 12);
    EXPECT_TRUE(cache.AllocateSlots(v->id, 4).has_value());
    v->num_computed = 16;
    v->window = WindowPolicy::Sliding(16, 4);
    for (Sequence* s : {w, v}) {
      s->holds_cache = true;
      scheduler->AddRunning(s);
    }
    EXPECT_EQ(cache.num_free_blocks(), 1);
  }
  KvCacheManager cache;
  std::unique_ptr<Scheduler> scheduler;
  Requests requests;
  Sequence* w = nullptr;
  Sequence* v = nullptr;
};

TEST(SchedulerTest, WindowCopiesAndShiftsRunBeforeTheSameSequencesSwapOut) {
  WindowPreemptionScene scene(/*swap=*/true);
  const SchedulerOutput out = scene.scheduler->Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, scene.w);
  ASSERT_EQ(out.preempted, std::vector<Sequence*>{scene.v});
  EXPECT_EQ(scene.v->state, SeqState::kSwapped);
  // The swap-out copies V's blocks to the host after the copy and the shift that made them:
  // run in any other order, the host would get the block before its copy (garbage) and
  // unrotated keys.
  ASSERT_EQ(out.block_ops.size(), 3u);
  EXPECT_EQ(out.block_ops[0].kind, BlockOp::Kind::kCopy);
  EXPECT_EQ(out.block_ops[1].kind, BlockOp::Kind::kShiftKeys);
  EXPECT_EQ(out.block_ops[1].delta, -4);
  EXPECT_EQ(out.block_ops[2].kind, BlockOp::Kind::kSwapOut);
  for (const BlockOp& op : out.block_ops) EXPECT_EQ(op.seq, scene.v);
  // The copy's destination and the shifted blocks are among the blocks swapped out.
  const BlockId copy_dst = out.block_ops[0].copies.at(0).second;
  std::vector<BlockId> swapped;
  for (const auto& [device, host] : out.block_ops[2].swap.device_host) swapped.push_back(device);
  EXPECT_NE(std::find(swapped.begin(), swapped.end(), copy_dst), swapped.end());
  for (BlockId b : out.block_ops[1].blocks) EXPECT_NE(std::find(swapped.begin(), swapped.end(), b), swapped.end());
  EXPECT_TRUE(scene.cache.VerifyIntegrity().ok());
}

TEST(SchedulerTest, ARecomputePreemptedSequenceKeepsNoByteMovements) {
  WindowPreemptionScene scene(/*swap=*/false);
  const SchedulerOutput out = scene.scheduler->Schedule();
  ASSERT_EQ(out.preempted, std::vector<Sequence*>{scene.v});
  EXPECT_EQ(scene.v->state, SeqState::kWaiting);
  EXPECT_EQ(scene.v->num_computed, 0);
  // Its copy and shift would write blocks that are free now (and may be handed to another
  // sequence in this very step): they are gone.
  EXPECT_TRUE(out.block_ops.empty());
  EXPECT_FALSE(scene.cache.Contains(scene.v->id));
  EXPECT_TRUE(scene.cache.VerifyIntegrity().ok());
}

// What the engine does after a step that ran: the scheduled tokens are computed and every
// sequence that reached the end of its tokens gets a sampled one.
void Decode(const SchedulerOutput& out) {
  Advance(out);
  for (const ScheduledWork& w : out.work) {
    if (w.seq->num_uncomputed() == 0) w.seq->tokens.push_back(7);
  }
}

// A sequence that has computed `computed` tokens and holds their cache, running.
void MakeRunning(KvCacheManager* cache, Scheduler* scheduler, Sequence* seq, int computed) {
  ASSERT_TRUE(cache->AllocateSlots(seq->id, computed).has_value());
  seq->num_computed = computed;
  seq->holds_cache = true;
  scheduler->AddRunning(seq);
}

TEST(SchedulerTest, TheTokenBudgetAdmitsInArrivalOrderAndChunksThePromptThatReachesIt) {
  KvCacheManager cache(Spec(), CacheConfig(64));
  Scheduler scheduler(Config(8, 10), &cache, nullptr);
  Requests requests;
  Sequence* a = requests.Add(6);
  Sequence* b = requests.Add(6);
  Sequence* c = requests.Add(6);
  for (Sequence* s : {c, a, b}) scheduler.AddWaiting(s);  // added out of order: arrival decides
  SchedulerOutput out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.work[0].seq, a);
  EXPECT_EQ(out.work[0].num_new_tokens, 6);
  EXPECT_EQ(out.work[0].num_logits, 1);
  EXPECT_EQ(out.work[1].seq, b);
  EXPECT_EQ(out.work[1].num_new_tokens, 4);  // the rest of the budget; no logits yet
  EXPECT_EQ(out.work[1].num_logits, 0);
  EXPECT_EQ(out.num_batched_tokens, 10);
  EXPECT_EQ(c->state, SeqState::kWaiting);
  EXPECT_FALSE(cache.Contains(c->id));  // a waiting request holds no blocks
  Decode(out);
  // Running sequences first (a's decode token, b's last 2 prompt tokens), then c fits.
  out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 3u);
  EXPECT_EQ(out.work[0].seq, a);
  EXPECT_EQ(out.work[0].num_new_tokens, 1);
  EXPECT_EQ(out.work[1].seq, b);
  EXPECT_EQ(out.work[1].num_new_tokens, 2);
  EXPECT_EQ(out.work[1].num_logits, 1);
  EXPECT_EQ(out.work[2].seq, c);
  EXPECT_EQ(out.work[2].num_new_tokens, 6);
  EXPECT_EQ(out.num_batched_tokens, 9);
}

TEST(SchedulerTest, APromptThatDoesNotFitTheCacheWaitsHoldingNothingUntilBlocksAreFree) {
  KvCacheManager cache(Spec(), CacheConfig(4));  // 16 tokens
  Scheduler scheduler(Config(8, 64), &cache, nullptr);
  Requests requests;
  Sequence* a = requests.Add(12);  // 3 blocks
  Sequence* b = requests.Add(8);   // 2 blocks: only 1 left
  scheduler.AddWaiting(a);
  scheduler.AddWaiting(b);
  SchedulerOutput out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, a);
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(b->state, SeqState::kWaiting);
  EXPECT_FALSE(cache.Contains(b->id));
  EXPECT_EQ(cache.num_free_blocks(), 1);
  Decode(out);
  // a ends (the engine removes it and frees its cache): b is admitted whole.
  scheduler.Remove(a);
  cache.Free(a->id);
  out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, b);
  EXPECT_EQ(out.work[0].num_new_tokens, 8);
  EXPECT_EQ(b->state, SeqState::kRunning);
  EXPECT_TRUE(cache.VerifyIntegrity().ok());
}

TEST(SchedulerTest, AdmissionStartsAfterTheCachedPrefix) {
  KvCacheManager cache(Spec(), CacheConfig(16));
  Scheduler scheduler(Config(8, 64), &cache, nullptr);
  Requests requests;
  Sequence* a = requests.Add(10);
  scheduler.AddWaiting(a);
  SchedulerOutput out = scheduler.Schedule();
  Decode(out);
  cache.CommitComputed(a->id, a->tokens, a->num_computed, "");  // publishes 2 full blocks
  Sequence* b = requests.Add(11);
  std::copy_n(a->tokens.begin(), 9, b->tokens.begin());  // 2 blocks and 1 token in common
  scheduler.AddWaiting(b);
  out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.work[1].seq, b);
  EXPECT_EQ(b->num_computed, 8);  // whole blocks only
  EXPECT_EQ(out.work[1].num_new_tokens, 3);
}

// Three running sequences fill the 6-block pool, each about to need a third block: x
// (priority 0, arrived last), y and z (priority 5; y arrived first). x comes first and
// finds no block, so the worst-ranked sequence, z (low priority, later arrival than y), is
// preempted; y then takes the last free block. Nothing new is admitted in that step.
struct PreemptionScene {
  explicit PreemptionScene(bool swap) : cache(Spec(), CacheConfig(6, /*host_blocks=*/16)) {
    SchedulerConfig config = Config(8, 64);
    config.preempt_by_swap = swap;
    scheduler = std::make_unique<Scheduler>(config, &cache, nullptr);
    y = requests.Add(9, /*priority=*/5);
    z = requests.Add(9, /*priority=*/5);
    x = requests.Add(9, /*priority=*/0);
    for (Sequence* s : {y, z, x}) MakeRunning(&cache, scheduler.get(), s, 8);
    newcomer = requests.Add(4, /*priority=*/-100);
    scheduler->AddWaiting(newcomer);
  }
  KvCacheManager cache;
  std::unique_ptr<Scheduler> scheduler;
  Requests requests;
  Sequence *x = nullptr, *y = nullptr, *z = nullptr, *newcomer = nullptr;
};

TEST(SchedulerTest, PreemptionTakesTheLowestPriorityThenTheLatestArrival) {
  PreemptionScene scene(/*swap=*/false);
  const SchedulerOutput out = scene.scheduler->Schedule();
  ASSERT_EQ(out.preempted, std::vector<Sequence*>{scene.z});
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.work[0].seq, scene.x);
  EXPECT_EQ(out.work[1].seq, scene.y);
  EXPECT_EQ(scene.newcomer->state, SeqState::kWaiting);  // memory is short: nobody new
  // Recompute: z drops its cache and waits to re-prefill all it has.
  EXPECT_EQ(scene.z->state, SeqState::kWaiting);
  EXPECT_EQ(scene.z->num_computed, 0);
  EXPECT_FALSE(scene.cache.Contains(scene.z->id));
  EXPECT_EQ(scene.scheduler->num_preemptions(), 1);
  EXPECT_EQ(scene.scheduler->num_waiting(), 2);
  EXPECT_TRUE(out.block_ops.empty());
}

TEST(SchedulerTest, SwappedSequencesComeBackBeforeNewArrivals) {
  PreemptionScene scene(/*swap=*/true);
  SchedulerOutput out = scene.scheduler->Schedule();
  ASSERT_EQ(out.preempted, std::vector<Sequence*>{scene.z});
  EXPECT_EQ(scene.z->state, SeqState::kSwapped);
  EXPECT_EQ(scene.z->num_computed, 8);  // its cache is on the host
  ASSERT_EQ(out.block_ops.size(), 1u);
  EXPECT_EQ(out.block_ops[0].kind, BlockOp::Kind::kSwapOut);
  EXPECT_EQ(out.block_ops[0].swap.device_host.size(), 2u);
  Decode(out);
  // y ends: 3 blocks free. z comes back (2 blocks + 1 for its token) before the newcomer,
  // whose priority is better, is considered; nothing is left for the newcomer.
  scene.scheduler->Remove(scene.y);
  scene.cache.Free(scene.y->id);
  out = scene.scheduler->Schedule();
  ASSERT_EQ(out.work.size(), 2u);
  EXPECT_EQ(out.work[0].seq, scene.x);
  EXPECT_EQ(out.work[1].seq, scene.z);
  EXPECT_EQ(out.work[1].num_new_tokens, 1);
  ASSERT_EQ(out.block_ops.size(), 1u);
  EXPECT_EQ(out.block_ops[0].kind, BlockOp::Kind::kSwapIn);
  EXPECT_EQ(scene.newcomer->state, SeqState::kWaiting);
  EXPECT_EQ(scene.scheduler->num_swapped(), 0);
  EXPECT_TRUE(scene.cache.VerifyIntegrity().ok());
}

// n = 2 with room for one running sequence: the second choice, forked from the first
// after its prompt, waits holding its forked cache, keeps it while it cannot run, and
// resumes from it (no new prefill) once the first choice ends.
TEST(SchedulerTest, AForkedChoiceWaitsWithItsCacheAndResumesFromIt) {
  KvCacheManager cache(Spec(), CacheConfig(16));
  Scheduler scheduler(Config(1, 64), &cache, nullptr);
  Requests requests;
  Sequence* first = requests.Add(6);
  Sequence* second = requests.AddChoice(first);
  scheduler.AddWaiting(first);
  SchedulerOutput out = scheduler.Schedule();
  Decode(out);  // the prompt is done; the first choice sampled a token
  // The engine forks the second choice from the first (the same prompt cache).
  ASSERT_TRUE(cache.Fork(first->id, second->id).has_value());
  second->tokens = first->tokens;
  second->tokens.back() = 8;  // it sampled another token
  second->num_computed = first->num_computed;
  second->holds_cache = true;
  ASSERT_FALSE(scheduler.has_running_room());
  scheduler.AddWaiting(second);
  out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, first);
  EXPECT_TRUE(cache.Contains(second->id));  // not given back while it waits
  EXPECT_EQ(second->num_computed, 6);
  Decode(out);
  scheduler.Remove(first);
  cache.Free(first->id);
  out = scheduler.Schedule();
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_EQ(out.work[0].seq, second);
  EXPECT_EQ(out.work[0].num_new_tokens, 1);  // its own token only
  EXPECT_EQ(out.work[0].num_logits, 1);
  EXPECT_TRUE(cache.VerifyIntegrity().ok());
}

}  // namespace scheduler_test
}  // namespace kvserve
