// WorkerThread: one thread that runs posted tasks one at a time, in posting order. The engine's
// token masks run on one while the forward pass runs (Post, then Wait before sampling); the gRPC
// reactors react to engine output on one (ReactorExecutor), so the engine thread never blocks.
//
// Posting never waits for a task to run. Wait returns once every task posted before it has
// run. Tasks still queued when the worker is destroyed are dropped; a running one finishes.
// Thread-safe; the destructor must not run on the worker's own thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kvserve {

class WorkerThread {
 public:
  WorkerThread();
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  void Post(std::function<void()> task);
  void Wait();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool running_ = false;  // a task is running now
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace kvserve
