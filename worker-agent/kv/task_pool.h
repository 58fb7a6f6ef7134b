// A fixed set of threads running queued tasks, each task on the thread that
// went idle last. The KV client runs each RPC (with its resends) as one task,
// so requests to different shards, and the chunks of one big tensor, are in
// flight at the same time.
//
// Tasks run in order of priority, lowest first, and in the order they came
// within one priority: the KV client gives each request the lowest key it
// carries, so the tensors the next forward pass needs first go first, and a
// big tensor, cut into requests, cannot hold back a small one queued later
// for longer than one request (P3's priority-based parameter propagation).
#ifndef KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_
#define KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_

#include <algorithm>
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
  explicit TaskPool(int threads) : idle_threads_(threads) {
    idle_.reserve(threads);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }
  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (IdleThread& thread : idle_threads_) thread.wake.notify_one();
    }
    for (auto& t : threads_) t.join();
  }
  // How many threads wait for a task now.
  int IdleThreads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(idle_.size());
  }

  void Run(std::function<void()> task, int64_t priority = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.emplace(std::make_pair(priority, next_++), std::move(task));
    // The thread that went idle last takes it: its stack is still in cache,
    // and the kernel wakes it on the core it ran on last, most likely the
    // one this process computes on. A condition variable would wake the
    // longest idle, so a step's requests went round all the threads, each
    // last run on whichever core (docs/performance.md, "Threads and cores").
    if (!idle_.empty()) {
      IdleThread& thread = idle_threads_[idle_.back()];
      idle_.pop_back();
      thread.woken = true;
      thread.wake.notify_one();
    }
  }

 private:
  struct IdleThread {
    std::condition_variable wake;
    bool woken = false;
  };

  void Loop(int self) {
    IdleThread& me = idle_threads_[self];
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      while (tasks_.empty() && !stopping_) {
        me.woken = false;
        idle_.push_back(self);
        me.wake.wait(lock, [&] { return me.woken || stopping_; });
        if (!me.woken) idle_.erase(std::find(idle_.begin(), idle_.end(), self));
      }
      // Stopping: what is queued still runs, as callers wait on it.
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
      lock.unlock();
      task();
      lock.lock();
    }
  }

  mutable std::mutex mutex_;
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> tasks_;  // (priority, arrival)
  uint64_t next_ = 0;
  bool stopping_ = false;
  std::vector<IdleThread> idle_threads_;  // one per thread, by index
  std::vector<int> idle_;                 // the idle threads, the last to go idle at the back
  std::vector<std::thread> threads_;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_TASK_POOL_H_
