// Engine: the thread-safe door to text generation. Submit() validates a request and hands it
// to the engine thread, which owns the scheduler, the KV cache manager, the model runner, the
// output processor and the chat sessions, and runs one step after another:
//
//   intake queue -> Scheduler::Schedule -> ModelRunner::ExecuteStep (byte movements, forward)
//   -> OutputProcessor::Process (sample, detokenize, stop, publish deltas) -> stats
//
// Front ends only talk to this class and to RequestStream. Submit/Abort/stats are safe from
// any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_block_map.h"
#include "cache/kv_spec.h"
#include "cache/prefix_index.h"
#include "common/profiler.h"
#include "common/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/backend_factory.h"
#include "engine/grammar/grammar_limits.h"
#include "engine/model/weights.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/state_dir.h"
#include "engine/stats.h"

namespace kvserve {

// Switches that only tests set (never production): fault injection and self-checks.
struct EngineTestHooks {
  bool verify_integrity_each_step = false;  // CHECK the cache after every step
  // Called on the engine thread before each forward pass with its index (0, 1, ... counting
  // failed passes too); true makes that pass fail as a real backend error would (the batch's
  // requests fail; kFaultAfterConsecutiveFailures in a row = fault). It may block (a test
  // holding the engine inside a step).
  std::function<bool(int64_t forward_index)> fail_forward;
  // Called by Submit after validation (and the grammar's compile), before the request enters
  // the intake queue (a test widening a race window, or holding a caller there).
  std::function<void(const GenerationRequest&)> before_enqueue;
};

struct EngineConfig {
  // Scheduling.
  int max_num_seqs = 64;              // sequences per step (also logits rows per step)
  int max_num_batched_tokens = 512;   // tokens per step (prefill is chunked to fit)
  int max_model_len = 0;              // 0: the model's context length
  int max_queued_requests = 1024;     // accepted requests waiting beyond the free slots; beyond: RESOURCE_EXHAUSTED
  bool preempt_by_swap = false;       // swap to the host tier instead of recomputing
  // Aging: a waiting request gains the whole priority range (kMinPriority..kMaxPriority) over
  // this long, so none waits behind later arrivals for more than about this.
  double aging_horizon_seconds = 60;
  // After kFaultAfterConsecutiveFailures failed forward passes in a row the engine refuses
  // new requests (UNAVAILABLE, unhealthy) for this long, then admits again; each further
  // failure in a row doubles it (up to 60 s); one good pass clears it.
  double fault_cooldown_seconds = 5;
  // KV cache.
  KvSpecConfig kv;                    // layers/heads/head_dim are filled from the model
  int num_blocks = 0;                 // pool size (the planner computes it from memory)
  bool enable_prefix_caching = true;
  int num_host_blocks = 0;            // host offload tier (0: off)
  // Memory pinned prefixes may hold (Engine::PinPrefix): -1 a quarter of the pool, 0 no pins.
  int64_t max_pinned_bytes = -1;
  // Compaction of old context (off when num_compact_blocks is 0; CPU backend): a region of
  // num_compact_blocks blocks in `compact_dtype` (the kv spec otherwise, so --kv-keep layers
  // stay at their dtype); every compact_every_tokens positions a sequence computes, its full
  // blocks older than its newest compact_keep_tokens move there (KvCacheManager::Compact).
  int num_compact_blocks = 0;
  KvDtype compact_dtype = KvDtype::kInt8;
  int compact_every_tokens = 512;
  int compact_keep_tokens = 1024;
  // Chat sessions.
  int chat_window_tokens = 0;         // 0: no sliding window (sessions limited by max_model_len)
  int chat_sink_tokens = 4;
  // The longest prompt (the whole re-sent history) a windowed session accepts; 0: 8 times the
  // context length (max_model_len or the model's). Without a window, max_model_len is the limit.
  int chat_max_prompt_tokens = 0;
  // A turn that finds its session busy waits this long for the request using it to end
  // (a client that stops a stream and sends the next turn at once) before it fails.
  double session_busy_wait_seconds = 2.0;
  double session_ttl_seconds = 600;   // idle sessions are dropped (or offloaded) after this
  int max_sessions = 256;
  int max_sessions_per_tenant = 64;
  // --state-dir: idle sessions' caches are written here when they leave memory and at
  // shutdown, and read back by their next turn (null: kept in memory only).
  std::shared_ptr<StateDir> state;
  // Structured outputs: what a spec may cost, compiled grammars kept, compile threads.
  GrammarLimits grammar;
  // Misc.
  uint64_t seed = 0;                  // default sampling seed base
  // Benchmarks only: forget every sequence's cache after each generated token, so each
  // token recomputes the whole sequence (the "no KV cache" baseline). Prefix caching must be
  // off and max_num_batched_tokens must hold a whole sequence.
  bool recompute_every_token = false;
  // Where step time goes (nullable, not owned; must outlive the engine).
  Profiler* profiler = nullptr;
  // KV events (a router's view of the prefix cache): called on the engine thread after each
  // step with the blocks the prefix index published or forgot since the last call, in order.
  // It must return quickly (hand them to another thread). `current_state` gives the whole
  // index as events (for a sink that lost events and must start over: KvEventPublisher's
  // overflow); call it only during the sink call. Null: nothing is recorded.
  std::function<void(std::vector<PrefixEvent> events, const std::function<std::vector<PrefixEvent>()>& current_state)>
      prefix_event_sink;
  EngineTestHooks test_hooks;
};

inline constexpr int kFaultAfterConsecutiveFailures = 3;

// The backend an engine of `config` needs on `device` ("cpu" or "cuda"): its step budgets
// become the backend's limits (CreateBackend).
[[nodiscard]] inline BackendConfig BackendConfigFor(const EngineConfig& config, std::string device = "cpu") {
  BackendConfig backend;
  backend.device = std::move(device);
  backend.max_num_batched_tokens = config.max_num_batched_tokens;
  backend.max_num_seqs = config.max_num_seqs;
  return backend;
}

// The KV cache as people see it (the web console's block map): the pool block by block and
// who holds each cache sequence. Taken on the engine thread between two steps.
struct CacheOwner {
  enum class Kind { kRequest, kSession, kUnknown };
  Kind kind = Kind::kUnknown;
  uint64_t request_id = 0;  // kRequest
  int choice = 0;           // kRequest: which of its n choices
  std::string session_id;   // the request's chat session, or the idle session's id
  std::string tenant;       // who submitted it (API key's tenant; "" without keys)
  std::string state;        // requests: "waiting", "running", "swapped"; sessions: "idle"
  int evicted_tokens = 0;   // removed by the sliding window
  int cached_prompt_tokens = 0;  // requests: prompt tokens served from the prefix cache or session
};
struct CacheSnapshot {
  KvBlockMap blocks;
  std::vector<CacheOwner> owners;  // parallel to blocks.seqs
  std::string kv_dtype;            // the pool's storage dtypes (KvSpec::Describe)
  std::string compact_dtype;       // the compaction region's ("" without compaction)
  int64_t compact_block_bytes = 0;
  EngineStats stats;               // as of the same moment (stats.cache included)
};

// A prompt prefix whose KV blocks stay in the cache until it is unpinned (Engine::PinPrefix).
struct PinnedPrefix {
  std::string id;          // "pin-<n>"
  std::string tenant;      // who pinned it ("" without API keys)
  int prompt_tokens = 0;   // tokens of the prompt
  int pinned_tokens = 0;   // its leading tokens held in whole pinned blocks
  int64_t bytes = 0;       // pinned blocks x block bytes (blocks shared with other pins count in each)
  int64_t created = 0;     // unix seconds
};
struct PinList {
  std::vector<PinnedPrefix> pins;  // the caller's, oldest first
  int64_t pinned_bytes = 0;        // all tenants' distinct pinned blocks
  int64_t max_pinned_bytes = 0;
};

class Engine {
 public:
  // Takes the model (kept alive for the engine's life) and a backend built for it; sizes the
  // KV pool (config.num_blocks must be > 0) and starts the engine thread.
  [[nodiscard]] static StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config,
                                                                std::shared_ptr<const Model> model,
                                                                std::unique_ptr<Backend> backend);
  virtual ~Engine() = default;

  // Validates and enqueues. Errors: INVALID_ARGUMENT (bad parameters, token ids outside the
  // vocabulary, empty prompt, n outside [1, min(kMaxChoices, max_num_seqs)], a session id
  // longer than kMaxSessionIdBytes, prompt logprobs with a session, a structured output that
  // does not compile: the message names the keyword and where), DEADLINE_EXCEEDED (its
  // grammar took longer than grammar.compile_timeout), OUT_OF_RANGE (prompt +
  // max_tokens beyond the context, unless the request's chat session uses a sliding window),
  // RESOURCE_EXHAUSTED (queue full, checked before a grammar is compiled; too many sessions;
  // too many grammars waiting to compile), UNAVAILABLE (draining, stopped or cooling down
  // after a fault). A structured output's grammar compiles on the grammar cache's threads
  // while the caller waits. The priority counts clamped to [kMinPriority, kMaxPriority].
  // Every accepted request's stream finishes, whatever happens next (Stop included).
  [[nodiscard]] virtual StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request) = 0;
  // Aborts a request; its blocks are freed within one step. Unknown ids are ignored.
  virtual void Abort(uint64_t request_id) = 0;
  // Ends tenant's chat session `session_id` (sessions live in one namespace per tenant): a
  // request using it, or waiting for it, is aborted (CANCELLED) and its cache is freed.
  // NOT_FOUND when tenant has no such session; UNAVAILABLE as for VerifyCacheIntegrity.
  [[nodiscard]] virtual Status EndSession(const std::string& tenant, const std::string& session_id,
                                          double timeout_seconds) = 0;

  // Latest snapshot (copied under a lock; cheap).
  [[nodiscard]] virtual EngineStats GetStats() const = 0;
  // Refuses new requests from now on; returns once in-flight ones finished or `grace` passed
  // (then aborts the rest). Returns the number aborted.
  virtual int Drain(double grace_seconds) = 0;
  // Stops the engine thread, aborting everything.
  virtual void Stop() = 0;
  // True while the engine thread makes progress (false while cooling down after a fault, or
  // during a stall).
  [[nodiscard]] virtual bool Healthy() const = 0;
  // True when Submit would take a well-formed request now: healthy, not draining or stopped,
  // and the queue below max_queued_requests (what /ready reports).
  [[nodiscard]] virtual bool AcceptingRequests() const = 0;
  // Runs KvCacheManager::VerifyIntegrity() on the engine thread between two steps and waits
  // for it (debug endpoints, soak tests). `stats` (nullable) receives the cache snapshot
  // taken at the same moment. UNAVAILABLE when the engine is stopped or the check did not
  // run within `timeout_seconds`.
  [[nodiscard]] virtual Status VerifyCacheIntegrity(double timeout_seconds, KvCacheStats* stats = nullptr) = 0;
  // The cache's block map and owners, taken on the engine thread between two steps (the
  // caller waits about one step). UNAVAILABLE as for VerifyCacheIntegrity.
  [[nodiscard]] virtual StatusOr<CacheSnapshot> SnapshotCache(double timeout_seconds) = 0;

  // Prefills `request`'s prompt as a request would (its cache_salt, tenant and priority; no
  // chat session; one token is sampled and dropped) and pins the whole blocks that hold it:
  // they are never evicted, and requests whose prompts start with those tokens under the same
  // salt skip that prefill. Blocks the caller until done or `timeout_seconds`. Errors:
  // FAILED_PRECONDITION (prefix caching or pinning off), INVALID_ARGUMENT (prompt shorter
  // than one block, a session id), RESOURCE_EXHAUSTED (the pins would hold more than
  // max_pinned_bytes; queue full), UNAVAILABLE (time limit passed, or the blocks were evicted
  // before they could be pinned: retry), CANCELLED (`cancelled`, polled every 100 ms while the
  // prompt is prefilled, returned true: the prefill is aborted), and Submit's errors.
  [[nodiscard]] virtual StatusOr<PinnedPrefix> PinPrefix(GenerationRequest request, double timeout_seconds,
                                                         std::function<bool()> cancelled = nullptr) = 0;
  // The pins `tenant` made (without API keys every pin has tenant "").
  [[nodiscard]] virtual StatusOr<PinList> ListPins(const std::string& tenant, double timeout_seconds) = 0;
  // Releases `tenant`'s pin `id` (its blocks become ordinary cached blocks). NOT_FOUND when
  // `tenant` has no such pin.
  [[nodiscard]] virtual Status Unpin(const std::string& tenant, const std::string& id, double timeout_seconds) = 0;

  virtual const Model& model() const = 0;
  virtual const EngineConfig& config() const = 0;
};

}  // namespace kvserve
