// MaskWorker (see mask_worker.h).
#include "engine/mask_worker.h"

#include <utility>

#include "common/check.h"

namespace kvserve {

MaskWorker::MaskWorker() : thread_([this] { Loop(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::Start(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!busy_) << "a mask job is still running";
    job_ = std::move(job);
    busy_ = true;
  }
  cv_.notify_all();
}

void MaskWorker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !busy_; });
}

void MaskWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || job_; });
    if (!job_) return;  // stopping with nothing to run
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    job();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace kvserve
