// TaskPool runs queued tasks lowest priority first, in arrival order within
// one priority (the KV client's P3 ordering, task_pool.h), each on the thread
// that went idle last.
#include "worker-agent/kv/task_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace kubeps {
namespace {

TEST(TaskPoolTest, QueuedTasksRunLowestPriorityFirstAndInArrivalOrderWithinOne) {
  std::vector<int> order;
  std::mutex mutex;
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  {
    TaskPool pool(1);
    std::promise<void> started;
    pool.Run([&] {  // holds the one thread while the others queue
      started.set_value();
      gate.wait();
    });
    started.get_future().wait();
    auto record = [&](int id) {
      return [&, id] {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(id);
      };
    };
    pool.Run(record(1), 5);
    pool.Run(record(2), 1);
    pool.Run(record(3), 3);
    pool.Run(record(4), 1);
    pool.Run(record(5), 0);
    open.set_value();
  }  // the destructor runs what is queued, then joins
  EXPECT_EQ(order, (std::vector<int>{5, 2, 4, 3, 1}));
}

// Waits (a bounded while) until `pool` has `count` idle threads.
bool AwaitIdle(TaskPool& pool, int count) {
  for (int i = 0; i < 5000 && pool.IdleThreads() != count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pool.IdleThreads() == count;
}

TEST(TaskPoolTest, TheThreadThatWentIdleLastTakesTheNextTask) {
  TaskPool pool(3);
  ASSERT_TRUE(AwaitIdle(pool, 3));
  // Three tasks hold the three threads; they end in the order 0, 1, 2, each
  // thread idle before the next ends.
  std::promise<void> release[3];
  std::promise<std::thread::id> ran_on[3];
  for (int i = 0; i < 3; ++i) {
    std::shared_future<void> gate = release[i].get_future().share();
    pool.Run([&ran_on, gate, i] {
      ran_on[i].set_value(std::this_thread::get_id());
      gate.wait();
    });
  }
  std::thread::id ids[3];
  for (int i = 0; i < 3; ++i) ids[i] = ran_on[i].get_future().get();
  ASSERT_TRUE(AwaitIdle(pool, 0));
  for (int i = 0; i < 3; ++i) {
    release[i].set_value();
    ASSERT_TRUE(AwaitIdle(pool, i + 1));
  }
  for (int round = 0; round < 3; ++round) {
    std::promise<std::thread::id> next;
    pool.Run([&next] { next.set_value(std::this_thread::get_id()); });
    EXPECT_EQ(next.get_future().get(), ids[2]) << "round " << round;
    ASSERT_TRUE(AwaitIdle(pool, 3));
  }
}

}  // namespace
}  // namespace kubeps
