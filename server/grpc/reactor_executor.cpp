#include "server/grpc/reactor_executor.h"

#include "common/check.h"

namespace kvserve {

ReactorExecutor::ReactorExecutor() : thread_([this] { Run(); }) {}

ReactorExecutor::~ReactorExecutor() {
  CHECK(std::this_thread::get_id() != thread_.get_id()) << "a ReactorExecutor destroyed by its own task";
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void ReactorExecutor::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ReactorExecutor::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvserve
