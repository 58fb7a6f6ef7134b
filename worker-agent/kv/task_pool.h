// A fixed set of threads running queued tasks. The KV client runs each RPC
// (with its resends) as one task, so requests to different shards, and the
// chunks of one big tensor, are in flight at the same time.
//
// Tasks run in order of priority, lowest first, and in the order they came
// within one priority: the KV client gives each request the lowest key it
// carries, so the tensors the next forward pass needs first go first, and a
// big tensor, cut into requests, cannot hold back a small one queued later
// for longer than one request (P3's priority-based parameter propagation).
#ifndef KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_
#define KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace kubeps {

class TaskPool {
 public:
  explicit TaskPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Run(std::function<void()> task, int64_t priority = 0) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.emplace(std::make_pair(priority, next_++), std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.begin()->second);
        tasks_.erase(tasks_.begin());
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> tasks_;  // (priority, arrival)
  uint64_t next_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_
