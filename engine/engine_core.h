// EngineCore: the Engine implementation. One engine thread owns the scheduler, the KV cache
// manager, the model runner, the output processor and the chat sessions, and loops:
//
//   take intake (new requests, aborts) -> Step: Scheduler::Schedule -> ModelRunner::ExecuteStep
//   (byte movements, forward pass) -> OutputProcessor::Process (sample, detokenize, stop,
//   emit) -> publish stats
//
// Only the intake queue (intake_mu_), the stats snapshot (stats_mu_) and RequestStreams are
// shared with other threads.
//
// Queue depth: num_queued_ counts the requests accepted by Submit that have not yet been
// scheduled (nor finished). Submit refuses when it reaches max_queued_requests plus the
// scheduler slots (max_num_seqs) that no accepted request holds yet. A request
// leaves the count exactly once (LeaveQueue): when its first step is scheduled, or before its
// stream finishes on any other path (max_tokens 0, failed admission, abort, stop). So a
// client that has seen its request end never finds it still counted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/chat_session_store.h"
#include "engine/engine.h"
#include "engine/grammar/structured_output.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace kvserve {

class EngineCore final : public Engine {
 public:
  EngineCore(const EngineConfig& config, std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend);
  ~EngineCore() override;

  [[nodiscard]] Status Init();

  StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request) override;
  void Abort(uint64_t request_id) override;
  Status EndSession(const std::string& tenant, const std::string& session_id, double timeout_seconds) override;
  EngineStats GetStats() const override;
  int Drain(double grace_seconds) override;
  void Stop() override;
  bool Healthy() const override;
  bool AcceptingRequests() const override;
  Status VerifyCacheIntegrity(double timeout_seconds, KvCacheStats* stats) override;
  StatusOr<CacheSnapshot> SnapshotCache(double timeout_seconds) override;
  StatusOr<PinnedPrefix> PinPrefix(GenerationRequest request, double timeout_seconds,
                                   std::function<bool()> cancelled) override;
  StatusOr<PinList> ListPins(const std::string& tenant, double timeout_seconds) override;
  Status Unpin(const std::string& tenant, const std::string& id, double timeout_seconds) override;
  const Model& model() const override { return *model_; }
  const EngineConfig& config() const override { return config_; }

 private:
  // ---- engine thread: loop and steps (engine_core.cpp) ----
  void Loop();
  // Moves intake into engine state; returns whether anything arrived.
  bool TakeIntake();
  void Admit(std::unique_ptr<Request> request);
  // ---- chat sessions (engine_sessions.cpp); engine thread ----
  // Gives a session request's first choice its session's cache and queues it. False (nothing
  // done) when the session is busy and `may_wait`; otherwise a busy session fails it.
  bool QueueSessionRequest(Request* r, bool may_wait);
  // Tries the requests that wait for a busy session again; fails those past their deadline.
  void RetryParked();
  void AbortRequest(uint64_t id, Status why);
  // Runs `fn` on the engine thread between two steps and waits up to `timeout_seconds` for
  // its result (UNAVAILABLE when the engine is stopped or it did not run in time).
  template <typename T>
  StatusOr<T> RunOnEngineThread(std::function<T()> fn, double timeout_seconds);
  CacheSnapshot TakeCacheSnapshot() const;
  // ---- pins (engine_pins.cpp); engine thread ----
  StatusOr<PinnedPrefix> PinComputedPrompt(const GenerationRequest& request);
  int64_t max_pinned_bytes() const;
  // One iteration: schedule, execute (byte movements, forward pass), process outputs,
  // publish stats. Returns false when nothing could run (the loop then waits for aborts or
  // new requests instead of spinning).
  bool Step();
  // Scheduler::Schedule plus the request accounting it implies (queue depth, cached prompt
  // tokens, preemptions).
  SchedulerOutput Schedule();
  // After a successful step: step stats, reaping, the integrity self-check, publishing.
  void EndStep(Clock::time_point start, const SchedulerOutput& out);
  // Takes `request` out of the queue depth if it is still in it (see the note above).
  void LeaveQueue(Request* request);
  // A failed step (byte movement or forward pass): fails `requests`, counts toward the fault
  // cool-down.
  void FailStep(const std::vector<Request*>& requests, const Status& why);
  // Copies stats to the shared snapshot. The cache's block census walks the whole pool, so it
  // is refreshed at most every kCacheStatsInterval unless `full` (idle engine, end of run).
  void PublishStats(bool full = false);
  // Destroys requests whose streams finished during this iteration (pointers stay valid
  // until then).
  void ReapFinished();
  bool HasWork() const { return requests_.size() > output_->num_finished(); }

  const EngineConfig config_;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  const int vocab_size_;
  int max_model_len_ = 0;  // the longest sequence: the context length, or the pool when smaller
  int context_len_ = 0;    // max_model_len or the model's: windowed sessions' limits

  // Shared with submitting threads.
  mutable std::mutex intake_mu_;
  std::condition_variable intake_cv_;
  std::vector<std::unique_ptr<Request>> intake_;
  std::vector<uint64_t> intake_aborts_;
  std::vector<std::function<void()>> intake_tasks_;  // run on the engine thread (RunOnEngineThread)
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> draining_{false};
  bool intake_closed_ = false;  // guarded by intake_mu_: the loop took its last intake
  // Whether Submit may accept one more request (see the queue depth note). REQUIRES intake_mu_.
  bool QueueHasRoomLocked() const;
  int num_queued_ = 0;          // guarded by intake_mu_: see the queue depth note above
  std::atomic<int> num_in_flight_{0};
  std::atomic<int64_t> last_progress_ns_{0};
  std::atomic<int64_t> fault_until_ns_{0};  // unhealthy (refusing new requests) until then
  std::unique_ptr<GrammarCache> grammars_;  // structured outputs, compiled by Submit
  std::atomic<int64_t> grammar_compile_errors_{0};

  mutable std::mutex stats_mu_;
  EngineStats snapshot_;

  // Engine thread only.
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ChatSessionStore> sessions_;
  std::map<PinId, PinnedPrefix> pins_;
  std::unique_ptr<OutputProcessor> output_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_arrival_ = 0;
  SeqId next_seq_id_ = 1;
  std::vector<float> logits_;  // [max_num_seqs][vocab]
  std::vector<Request*> failed_;  // a failed step's requests
  // Session requests waiting for their session's current request to end: (id, deadline).
  std::vector<std::pair<uint64_t, Clock::time_point>> parked_;
  EngineStats stats_;
  int consecutive_failures_ = 0;
  std::deque<std::pair<Clock::time_point, int64_t>> throughput_window_;
  Clock::time_point last_expiry_{};
  Clock::time_point last_cache_stats_{};

  std::thread thread_;
};

template <typename T>
StatusOr<T> EngineCore::RunOnEngineThread(std::function<T()> fn, double timeout_seconds) {
  auto result = std::make_shared<std::promise<T>>();
  std::future<T> future = result->get_future();
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    if (stop_ || intake_closed_) return UnavailableError("the engine is stopped");
    intake_tasks_.push_back([result, fn = std::move(fn)] { result->set_value(fn()); });
  }
  intake_cv_.notify_one();
  if (future.wait_for(std::chrono::duration<double>(timeout_seconds)) != std::future_status::ready) {
    return UnavailableError("the engine thread did not run the request in time");
  }
  return future.get();
}

}  // namespace kvserve
