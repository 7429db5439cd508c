// MaskWorker: one thread that runs a job while the engine thread runs the forward pass (the
// token masks of structured outputs), so that masks cost the step nothing when they take less
// than the forward pass. Start() then Wait(), from one thread (the engine thread).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kvserve {

class MaskWorker {
 public:
  MaskWorker();
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Runs `job` on the worker thread. REQUIRES: no job running (Wait() after each Start()).
  void Start(std::function<void()> job);
  // Returns once the last started job has finished (at once when none runs).
  void Wait();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;  // guarded by mu_: the job to run, empty once done
  bool busy_ = false;          // guarded by mu_: a job was started and has not finished
  bool stop_ = false;          // guarded by mu_
  std::thread thread_;
};

}  // namespace kvserve
