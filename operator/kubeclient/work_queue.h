// The operator's work queue, as client-go's rate-limited queue: a key is
// queued at most once, a key being processed is never handed to a second
// worker, a key re-added meanwhile is processed again afterwards, and
// failures are retried per key with exponential backoff.
//
// Thread-safe: informers add keys while workers take them.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_WORK_QUEUE_H_
#define KUBEPS_OPERATOR_KUBECLIENT_WORK_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace kubeps::kube {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Retries a failed key after 100 ms * 2^failures, at most 30 s.
  void AddRateLimited(const std::string& key);
  // Clears the key's failure count after a success.
  void Forget(const std::string& key);
  // Blocks for the next key; nullopt once ShutDown() was called.
  std::optional<std::string> Get();
  void Done(const std::string& key);
  void ShutDown();
  size_t Depth() const;

 private:
  void Promote();  // moves due delayed keys to the queue (requires mutex_)

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_, processing_, dirty_;
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, int> failures_;
  bool shut_down_ = false;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_WORK_QUEUE_H_
