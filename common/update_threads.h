// Threads that split one big part's update: Adam over a part of millions of
// floats takes milliseconds on one core, and in a sync job every worker
// waits for it. A server with cores to spare (its pod requested several, or
// a local run has more cores than the job has servers) runs each range of
// the part on a core of its own, the calling thread taking the first. (A
// one-process run cuts the same ranges for its model's OpenMP threads.)
//
// One update at a time uses the helpers; an update that comes while they
// are busy runs whole on its own thread instead of waiting for them.
// Thread-safe.
#ifndef KUBEPS_COMMON_UPDATE_THREADS_H_
#define KUBEPS_COMMON_UPDATE_THREADS_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kubeps {

class UpdateThreads {
 public:
  using Range = std::function<void(size_t begin, size_t end)>;
  // Fewer elements than this per thread are not worth waking one for.
  static constexpr size_t kMinRange = 64 * 1024;

  // `threads` in all, the caller's included: starts threads - 1 helpers.
  explicit UpdateThreads(int threads);
  ~UpdateThreads();
  UpdateThreads(const UpdateThreads&) = delete;
  UpdateThreads& operator=(const UpdateThreads&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  // Calls `range` once for each range of [0, n), at most threads() ranges
  // of at least kMinRange elements (the boundaries on multiples of 16, a
  // cache line of floats), and returns when every one has returned.
  void Run(size_t n, const Range& range);
  // How many ranges Run cuts n elements into on `threads` threads: at most
  // one a thread, each at least kMinRange.
  static int RangesFor(size_t n, int threads);
  // Range k of `ranges` over n elements, as Run cuts them.
  static void Bounds(size_t n, int ranges, int k, size_t* begin, size_t* end);
  // Run as a function (Optimizer::ApplyInRanges takes one).
  std::function<void(size_t n, const Range& range)> Runner() {
    return [this](size_t n, const Range& range) { Run(n, range); };
  }

 private:
  void Help(int k);

  std::mutex running_;  // held by the one Run that uses the helpers
  std::mutex mutex_;    // guards the fields below
  std::condition_variable posted_, finished_;
  uint64_t generation_ = 0;  // counts the updates posted to the helpers
  const Range* range_ = nullptr;
  size_t n_ = 0;
  int ranges_ = 0;
  int unfinished_ = 0;  // helpers' ranges of the current update not yet done
  bool stopping_ = false;
  std::vector<std::thread> helpers_;  // last: they start once everything above is built
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_UPDATE_THREADS_H_
