// OutputProcessor: the output side of the engine loop and the end of every sequence and
// request.
//
// After a successful forward pass, Process() advances each scheduled sequence, publishes its
// computed blocks to the prefix cache, scores prompt tokens (prompt logprobs), and where a
// logits row ends the known tokens: forks the other choices (n > 1), samples, detokenizes,
// matches stop strings and pushes the delta to the request's stream. It also ends sequences
// (finish, abort, failure), releases their caches (to their chat session or to the pool) and
// finishes a request's stream once all its choices have ended.
//
// A request whose stream finished is listed until TakeFinished(); the engine destroys it at
// the end of its iteration (pointers stay valid until then). Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/profiler.h"
#include "common/status.h"
#include "engine/chat_session_store.h"
#include "engine/grammar/matcher.h"
#include "common/worker_thread.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/stats.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve {

// A sequence's output state: what turns logits into a client's text. The scheduler never
// reads it.
struct SequenceOutput {
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDetokenizer> detokenizer;  // null when the request wants no text
  std::unique_ptr<StopMatcher> stop;                  // with the detokenizer
  std::string matched_stop;
  Clock::time_point last_token_time{};
  // Structured outputs: the sequence's position in its request's grammar and the tokens it
  // allows next (`mask_ready`: computed for the current position, not yet used).
  std::unique_ptr<GrammarMatcher> grammar;
  TokenMask mask;
  bool mask_ready = false;
  // A lazy grammar (StructuredOutputSpec::triggers) not started yet, and the output's last
  // bytes, where a trigger is looked for after each token.
  bool awaiting_trigger = false;
  std::string trigger_tail;
  // Prompt logprobs: entry k is prompt token k's (entry 0 has none); its size is
  // Sequence::num_prompt_logprobs until the entries are sent (moved into one delta).
  std::vector<TokenLogprob> prompt_logprobs;
};

struct OutputProcessorConfig {
  int vocab_size = 0;
  int max_model_len = 0;  // a sequence that reaches it (outside a sliding window) ends: "length"
  uint64_t seed = 0;      // base of the per-request sampling seeds
  bool recompute_every_token = false;  // benchmarks: drop the cache after every token
  Profiler* profiler = nullptr;
  // Compaction of old context (EngineConfig): every `compact_every_tokens` positions a
  // sequence computes, its full blocks older than its newest `compact_keep_tokens` move to the
  // cache's compact region. 0: off.
  int compact_every_tokens = 0;
  int compact_keep_tokens = 0;
};

class OutputProcessor {
 public:
  // The engine parts the processor acts on. REQUIRES: all outlive the processor.
  struct Parts {
    KvCacheManager* cache = nullptr;
    ModelRunner* runner = nullptr;  // copies blocks for forked choices
    Scheduler* scheduler = nullptr;
    ChatSessionStore* sessions = nullptr;
    const Tokenizer* tokenizer = nullptr;
    EngineStats* stats = nullptr;  // counters and latency histograms this side observes
    // Called once per request just before its stream finishes (the queue-depth count).
    std::function<void(Request*)> on_request_end;
  };
  OutputProcessor(const OutputProcessorConfig& config, Parts parts);

  // A new sequence for choice `choice` of `request`, with its sampler, detokenizer and stop
  // matcher, holding no cache.
  [[nodiscard]] std::unique_ptr<Sequence> NewSequence(Request* request, int choice, SeqId id) const;
  // Structured outputs: starts computing, on the mask thread, the token masks of the
  // sequences of `out` that sample after this step, so they overlap the forward pass.
  // WaitMasks() before anything else touches the sequences (Process, or a failed step).
  void StartMasks(const SchedulerOutput& out);
  void WaitMasks();
  // The outputs of one successful step: `logits` holds out.num_logits rows in work order.
  // Modifies the rows (sampling scratch).
  void Process(const SchedulerOutput& out, std::span<float> logits);
  // Ends every choice with finish reason "length" and no tokens (max_tokens == 0).
  void FinishWithoutTokens(Request* request);
  // Ends `seq` (no-op if already ended): leaves the scheduler, releases its cache; abort and
  // error are pushed to the stream. Ends the request when it was the last choice.
  void FinishSequence(Sequence* seq, FinishReason reason);
  // Ends every choice of `request` with an error and finishes its stream with `why`.
  void FailRequest(Request* request, Status why);

  // Ids of the requests whose streams finished since the last call.
  [[nodiscard]] std::vector<uint64_t> TakeFinished();
  [[nodiscard]] size_t num_finished() const { return finished_.size(); }

 private:
  // Appends the logprob of prompt token pos + 1 (from the logits at position pos).
  void ScorePromptToken(Sequence* seq, int pos, std::span<const float> logits);
  // Samples the next token of `seq` from `logits` (scratch, modified) and emits it.
  void SampleAndEmit(Sequence* seq, std::span<float> logits);
  // Structured outputs: the next token of `seq` among those its grammar allows (without a draw
  // when one is allowed, or only end-of-text that ignore_eos/min_tokens would mask); `*ends`
  // when it ends the structure (end-of-text). False when none can be drawn: the sequence
  // ended with an error.
  bool SampleStructured(Sequence* seq, std::span<float> logits, SampledToken* sampled, bool* ends);
  // n > 1: the other choices start from the parent's prompt cache and sample from the same
  // logits.
  void ForkChoices(Sequence* parent, std::span<const float> logits);
  // Releases the sequence's cache (to its chat session, or back to the pool).
  void ReleaseSequence(Sequence* seq);
  void MaybeFinishRequest(Request* request);
  // Compaction of `seq`'s old context when it is due; a failed block conversion fails its request.
  // A lazy grammar: looks for a trigger in the output after `id` and starts the grammar at it.
  // Returns the text a control token that is a trigger adds to the output ("" otherwise).
  std::string WatchTrigger(Sequence* seq, int32_t id);
  void MaybeCompact(Sequence* seq);

  const OutputProcessorConfig config_;
  const Parts parts_;
  std::vector<int32_t> stop_ids_;  // end-of-generation tokens, the tokenizer's EOS first
  std::vector<float> fork_logits_;  // [vocab]
  SamplerScratch scratch_;
  std::unique_ptr<WorkerThread> mask_worker_;  // created with the first structured output
  std::vector<SequenceOutput*> mask_jobs_;   // the running mask job's sequences
  std::vector<double> mask_seconds_;         // and how long each mask took
  std::vector<uint64_t> finished_;
};

}  // namespace kvserve
