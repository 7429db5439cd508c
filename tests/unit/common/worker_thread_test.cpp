// WorkerThread: tasks in posting order, Wait until the posted ones have run, queued tasks
// dropped at destruction. (The gRPC reactors' use: tests/unit/server/reactor_executor_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "common/worker_thread.h"

namespace kvserve {
namespace worker_thread_test {

TEST(WorkerThreadTest, WaitReturnsOnceEveryPostedTaskHasRun) {
  WorkerThread worker;
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) {
    worker.Post([&order, i] {
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      order.push_back(i);
    });
  }
  worker.Wait();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  worker.Wait();  // nothing posted: returns at once
}

TEST(WorkerThreadTest, TasksStillQueuedAtDestructionAreDropped) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::thread releaser;
  {
    WorkerThread worker;
    std::promise<void> started;
    worker.Post([&] {
      started.set_value();
      gate.wait();
      ++ran;
    });
    for (int i = 0; i < 10; ++i) worker.Post([&] { ++ran; });
    started.get_future().wait();
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      release.set_value();
    });
  }  // the running task finishes; the ten queued are dropped
  releaser.join();
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace worker_thread_test
}  // namespace kvserve
