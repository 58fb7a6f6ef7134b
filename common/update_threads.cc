#include "common/update_threads.h"

#include <algorithm>

namespace kubeps {

UpdateThreads::UpdateThreads(int threads) {
  for (int k = 1; k < threads; ++k) helpers_.emplace_back([this, k] { Help(k); });
}

UpdateThreads::~UpdateThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  posted_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

void UpdateThreads::Bounds(size_t n, int ranges, int k, size_t* begin, size_t* end) {
  auto cut = [&](int i) { return i == ranges ? n : (n / ranges * i) & ~size_t{15}; };
  *begin = cut(k);
  *end = cut(k + 1);
}

int UpdateThreads::RangesFor(size_t n, int threads) {
  return static_cast<int>(std::min<size_t>(threads, n / kMinRange));
}

void UpdateThreads::Run(size_t n, const Range& range) {
  const int ranges = RangesFor(n, threads());
  if (ranges <= 1 || !running_.try_lock()) {
    range(0, n);
    return;
  }
  std::lock_guard<std::mutex> running(running_, std::adopt_lock);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    range_ = &range;
    n_ = n;
    ranges_ = ranges;
    unfinished_ = ranges - 1;
    ++generation_;
  }
  posted_.notify_all();
  size_t begin, end;
  Bounds(n, ranges, 0, &begin, &end);
  range(begin, end);
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return unfinished_ == 0; });
}

void UpdateThreads::Help(int k) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    posted_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    // A helper not needed for this update (a part split into fewer ranges)
    // waits for the next; Run waits only for those that are.
    if (k >= ranges_) continue;
    const Range& range = *range_;
    size_t begin, end;
    Bounds(n_, ranges_, k, &begin, &end);
    lock.unlock();
    range(begin, end);
    lock.lock();
    if (--unfinished_ == 0) finished_.notify_one();
  }
}

}  // namespace kubeps
