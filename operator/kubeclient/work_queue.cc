#include "operator/kubeclient/work_queue.h"

#include <algorithm>

namespace kubeps::kube {

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return;
  if (processing_.count(key)) {
    dirty_.insert(key);  // handed out again once the current run is Done
    return;
  }
  if (queued_.insert(key).second) queue_.push_back(key);
  changed_.notify_one();
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return Add(key);
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return;
  delayed_.emplace(Clock::now() + delay, key);
  changed_.notify_one();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  int failures;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failures = failures_[key]++;
  }
  auto delay = std::chrono::milliseconds(100) * (1LL << std::min(failures, 9));
  AddAfter(key, std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(30)));
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_.erase(key);
}

void WorkQueue::Promote() {
  const auto now = Clock::now();
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    if (processing_.count(key))
      dirty_.insert(key);
    else if (queued_.insert(key).second)
      queue_.push_back(key);
  }
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    Promote();
    if (shut_down_) return std::nullopt;
    if (!queue_.empty()) break;
    if (delayed_.empty())
      changed_.wait(lock);
    else
      changed_.wait_until(lock, delayed_.begin()->first);
  }
  std::string key = queue_.front();
  queue_.pop_front();
  queued_.erase(key);
  processing_.insert(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  processing_.erase(key);
  if (dirty_.erase(key) && queued_.insert(key).second) {
    queue_.push_back(key);
    changed_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mutex_);
  shut_down_ = true;
  changed_.notify_all();
}

size_t WorkQueue::Depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::string> waiting(queued_);
  for (const auto& [when, key] : delayed_) waiting.insert(key);
  return waiting.size();
}

}  // namespace kubeps::kube
