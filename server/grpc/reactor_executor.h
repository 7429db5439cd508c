// ReactorExecutor: the thread on which the gRPC reactors react to engine output. A
// RequestStream listener runs on the engine thread and must not block it; a reactor's work
// (draining the stream, building and serializing the message, StartWrite or Finish) takes
// the reactor's mutex, which gRPC's threads hold while they run the reactor's own reactions.
// So the listener only posts the reactor here, and this thread does that work.
// The pin methods use instances of their own as worker threads for calls that block.
//
// Posting never waits for a task to run; tasks run one at a time in posting order. Tasks
// still queued when the executor is destroyed are dropped (by then the gRPC server has shut
// down and every reactor is done). Thread-safe; the destructor must not run on the
// executor's own thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kvserve {

class ReactorExecutor {
 public:
  ReactorExecutor();
  ~ReactorExecutor();
  ReactorExecutor(const ReactorExecutor&) = delete;
  ReactorExecutor& operator=(const ReactorExecutor&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace kvserve
