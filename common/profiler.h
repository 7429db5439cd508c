// Profiler: where a step's time goes. Components that do timed work (scheduler, runner,
// backend operations, sampler, detokenizer, network writes) add elapsed time to a category;
// a report divides it by steps. Disabled profilers cost one branch per call site.
//
// Counters are relaxed atomics so the engine thread and the server's I/O threads can add
// concurrently; Report() may run on any thread. Owned by whoever runs the engine (passed by
// pointer, never global).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace kvserve {

enum class ProfileOp : int {
  // Engine.
  kSchedule,
  kBatchBuild,
  kSample,
  kDetokenize,
  kPublish,
  // Forward pass, by operation.
  kEmbed,
  kNorm,
  kQkv,
  kRope,
  kKvWrite,
  kAttention,
  kAttnOut,
  kGateUp,
  kSwiGlu,
  kDown,
  kLogits,
  // Front ends.
  kNetworkWrite,
  kCount,
};
const char* ProfileOpName(ProfileOp op);
// True for the operations that make up the forward pass.
bool IsForwardOp(ProfileOp op);

class Profiler {
 public:
  explicit Profiler(bool enabled = true) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  void Add(ProfileOp op, int64_t nanoseconds) {
    if (enabled_) ns_[static_cast<int>(op)].fetch_add(nanoseconds, std::memory_order_relaxed);
  }
  void CountStep(int64_t step_nanoseconds) {
    if (!enabled_) return;
    steps_.fetch_add(1, std::memory_order_relaxed);
    step_ns_.fetch_add(step_nanoseconds, std::memory_order_relaxed);
  }
  void Reset();
  // A markdown table: per category, ms per step and share of step time; the forward pass's
  // total and the time outside it.
  std::string Report() const;

  // Adds the time from construction to destruction (or Stop) to `op`.
  class Scope {
   public:
    Scope(Profiler* p, ProfileOp op) : p_(p && p->enabled() ? p : nullptr), op_(op) {
      if (p_) start_ = std::chrono::steady_clock::now();
    }
    ~Scope() { Stop(); }
    void Stop() {
      if (!p_) return;
      p_->Add(op_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
      p_ = nullptr;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Profiler* p_;
    ProfileOp op_;
    std::chrono::steady_clock::time_point start_;
  };

  // Adds this thread's CPU time between construction and destruction to `op`. CPU time, not
  // wall time: an I/O thread may wait for a core that the forward pass holds, and that wait
  // is not work this thread does.
  class ThreadCpuScope {
   public:
    ThreadCpuScope(Profiler* p, ProfileOp op) : p_(p && p->enabled() ? p : nullptr), op_(op) {
      if (p_) start_ = ThreadCpuNanos();
    }
    ~ThreadCpuScope() {
      if (p_) p_->Add(op_, ThreadCpuNanos() - start_);
    }
    ThreadCpuScope(const ThreadCpuScope&) = delete;
    ThreadCpuScope& operator=(const ThreadCpuScope&) = delete;

   private:
    Profiler* p_;
    ProfileOp op_;
    int64_t start_ = 0;
  };
  // CPU time the calling thread has used, in nanoseconds.
  static int64_t ThreadCpuNanos();

 private:
  const bool enabled_;
  std::array<std::atomic<int64_t>, static_cast<int>(ProfileOp::kCount)> ns_{};
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> step_ns_{0};
};

}  // namespace kvserve
