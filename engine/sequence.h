// Request and Sequence: the engine thread's state for one submitted request and each of its
// choices. A Sequence is what the scheduler schedules and what owns a KV cache sequence id.
// It holds the scheduling state; its output state (sampler, detokenizer, stop matcher) is a
// SequenceOutput (output_processor.h) that only the OutputProcessor reads.
//
// Token bookkeeping of a sequence:
//   tokens        all tokens in order (prompt, then generated), including any that a sliding
//                 window evicted from the cache;
//   num_computed  tokens[0, num_computed) have been run through the model;
//   num_evicted   tokens after the sink blocks that the window removed; the cache position of
//                 token i (i beyond the evicted run) is i - num_evicted.
// Prompt logprobs (request sampling.prompt_logprobs >= 0, choice 0): prompt tokens
// [0, num_prompt_logprobs) have their entry (token 0 has none, so it starts at 1); the entry
// of token k comes from the logits at position k - 1. They are complete when
// num_prompt_logprobs == prompt_len, which happens before the first token is sampled
// (generation needs the whole prompt computed).
// Engine thread only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/window_policy.h"
#include "engine/request.h"
#include "engine/request_stream.h"

namespace kvserve {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Request;
struct SequenceOutput;
class CompiledGrammar;  // output_processor.h

enum class SeqState { kWaiting, kRunning, kSwapped, kFinished };

struct Sequence {
  SeqId id = 0;
  Request* request = nullptr;
  int choice = 0;
  SeqState state = SeqState::kWaiting;
  std::vector<int32_t> tokens;
  int prompt_len = 0;
  int num_computed = 0;
  int num_evicted = 0;
  int num_generated = 0;
  int compacted_at = 0;         // num_computed when its old context was last compacted
  bool holds_cache = false;     // the manager knows this id (possibly with 0 blocks)
  bool forked_children = false; // n > 1: children created after the prompt
  bool scheduled_once = false;  // for the prefix-hit count of the first schedule
  bool session_attached = false;  // choice 0 of a session request that holds the session
  WindowPolicy window;
  std::optional<FinishReason> finish;
  bool wants_prompt_logprobs = false;
  int num_prompt_logprobs = 0;

  std::unique_ptr<SequenceOutput> output;  // null in tests that drive the scheduler alone

  Sequence();
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  int cache_position() const { return num_computed - num_evicted; }
  bool prompt_logprobs_pending() const { return wants_prompt_logprobs && num_prompt_logprobs < prompt_len; }
  // The first token index whose logits this sequence needs: every prompt position from the
  // next unscored one while prompt logprobs are pending, else only the last token.
  int first_logits_position() const {
    return prompt_logprobs_pending() ? num_prompt_logprobs - 1 : static_cast<int>(tokens.size()) - 1;
  }
  // Prompt logprobs need logits at every prompt position: no prefix-cache hit.
  bool reads_prefix_cache() const { return !wants_prompt_logprobs; }
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
  bool finished() const { return finish.has_value(); }
};

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;  // submission order, for FCFS
  GenerationRequest params;
  std::shared_ptr<RequestStream> stream;
  std::vector<std::unique_ptr<Sequence>> seqs;  // one per choice
  Clock::time_point submitted{};
  std::optional<Clock::time_point> first_token;
  RequestUsage usage;
  bool aborted = false;
  bool done = false;  // stream finished; destroyed at the end of the engine iteration
  // Counted in EngineCore's queue depth: from Submit until first scheduled or finished.
  bool queued = false;
  Status error;       // non-OK: the request failed
  // params.structured compiled (null without one); each choice runs its own matcher over it.
  std::shared_ptr<CompiledGrammar> grammar;
  double grammar_compile_seconds = 0;  // 0 when the grammar came from the cache

  // The scheduling priority: params.priority clamped to [kMinPriority, kMaxPriority].
  int priority() const { return std::clamp(params.priority, kMinPriority, kMaxPriority); }
  bool all_finished() const {
    for (const auto& s : seqs) {
      if (!s->finished()) return false;
    }
    return true;
  }
};

}  // namespace kvserve
