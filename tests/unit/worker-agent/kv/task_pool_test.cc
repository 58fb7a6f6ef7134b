// TaskPool runs queued tasks lowest priority first, in arrival order within
// one priority (the KV client's P3 ordering, task_pool.h).
#include "worker-agent/kv/task_pool.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
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

}  // namespace
}  // namespace kubeps
