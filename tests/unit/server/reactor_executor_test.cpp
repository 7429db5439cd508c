// The gRPC reactors' listener (PostingListener) and ReactorExecutor: the engine thread's
// listener returns while a gRPC thread holds the reactor's mutex (the reaction runs later on
// the executor), listener calls that arrive while a reaction is queued share it, and a
// reactor that is done, or an executor that is gone, gets no reaction.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "server/grpc/grpc_reactors.h"
#include "server/grpc/reactor_executor.h"

namespace kvserve {
namespace reactor_executor_test {

struct FakeReactor {
  std::atomic<int> reactions{0};
  void React() { ++reactions; }
};

// Returns once every task posted before this call has run.
void Drain(ReactorExecutor& executor) {
  std::promise<void> done;
  executor.Post([&] { done.set_value(); });
  done.get_future().wait();
}

TEST(ReactorExecutorTest, TheListenerReturnsWhileAGrpcThreadHoldsTheReactor) {
  auto executor = std::make_shared<ReactorExecutor>();
  auto link = std::make_shared<ReactorLink<FakeReactor>>();
  FakeReactor reactor;
  link->reactor = &reactor;
  const std::function<void()> listener = PostingListener(link, executor, &FakeReactor::React);
  std::unique_lock<std::recursive_mutex> held(link->mu);  // a gRPC thread inside a reaction
  // The engine thread pushes 100 deltas. Were the listener to take the mutex, this join
  // would never return.
  std::thread engine([&] {
    for (int i = 0; i < 100; ++i) listener();
  });
  engine.join();
  EXPECT_EQ(reactor.reactions.load(), 0);
  held.unlock();
  Drain(*executor);
  // One reaction was queued first; while it waited for the mutex (after clearing `posted`)
  // at most one more was queued for the calls after it.
  EXPECT_GE(reactor.reactions.load(), 1);
  EXPECT_LE(reactor.reactions.load(), 2);
  // Output after the reactions ran posts again.
  listener();
  Drain(*executor);
  EXPECT_GE(reactor.reactions.load(), 2);
  EXPECT_LE(reactor.reactions.load(), 3);
}

TEST(ReactorExecutorTest, ADoneReactorOrAGoneExecutorGetsNoReaction) {
  auto executor = std::make_shared<ReactorExecutor>();
  auto link = std::make_shared<ReactorLink<FakeReactor>>();
  FakeReactor reactor;
  link->reactor = &reactor;
  const std::function<void()> listener = PostingListener(link, executor, &FakeReactor::React);
  listener();
  Drain(*executor);
  EXPECT_EQ(reactor.reactions.load(), 1);
  {
    std::lock_guard<std::recursive_mutex> lock(link->mu);
    link->reactor = nullptr;  // OnDone
  }
  listener();
  Drain(*executor);
  EXPECT_EQ(reactor.reactions.load(), 1);
  link->reactor = &reactor;
  executor.reset();  // the service shut down
  listener();  // no executor: nothing to post to, nothing crashes
  EXPECT_EQ(reactor.reactions.load(), 1);
}

TEST(ReactorExecutorTest, TasksRunOneAtATimeInPostingOrder) {
  ReactorExecutor executor;
  std::vector<int> order;  // touched only by the executor's thread until Drain returns
  std::atomic<int> running{0};
  bool overlapped = false;
  for (int i = 0; i < 200; ++i) {
    executor.Post([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      order.push_back(i);
      running.fetch_sub(1);
    });
  }
  Drain(executor);
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_FALSE(overlapped);
}

}  // namespace reactor_executor_test
}  // namespace kvserve
