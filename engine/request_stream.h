// RequestStream: the consumer end of one request's output. The engine thread appends deltas;
// any other thread reads them, blocking (Next) or not (TryDrain, with a listener that says
// when to look). One of the two synchronised types of the engine (the other is the intake
// queue). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "engine/request.h"

namespace kvserve {

class RequestStream {
 public:
  RequestStream(uint64_t id, int num_choices) : id_(id), num_choices_(num_choices) {}

  uint64_t id() const { return id_; }
  int num_choices() const { return num_choices_; }

  // Consumer. Blocks until there is output or the request is over, or `timeout` passes.
  // Moves pending deltas into `out` (appending). Returns false once the request is over and
  // everything was taken.
  bool Next(std::vector<StreamDelta>* out,
            std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // Non-blocking variant; returns whether anything was appended.
  bool TryDrain(std::vector<StreamDelta>* out);
  // Called on the engine thread whenever output arrives or the request ends; must be quick
  // and must not call back into the engine (post to an event loop instead). Replaces any
  // previous listener; called at once if output is already pending.
  void SetListener(std::function<void()> listener);
  // True when the request has ended (all choices finished, failed or aborted).
  bool done() const;
  // OK, or why the request failed (e.g. a fault in the forward pass, a rejected prompt).
  Status status() const;
  RequestUsage usage() const;

  // Producer (engine thread).
  void Push(StreamDelta delta);
  void Finish(Status status, const RequestUsage& usage);

 private:
  void Notify(std::unique_lock<std::mutex>& lock);

  const uint64_t id_;
  const int num_choices_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StreamDelta> pending_;
  std::function<void()> listener_;
  bool done_ = false;
  Status status_;
  RequestUsage usage_;
};

}  // namespace kvserve
