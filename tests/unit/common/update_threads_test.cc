// A big part's update split over threads (common/update_threads.h): every
// element once, in ranges on distinct threads; small parts and a busy pool
// on the caller alone.
#include "common/update_threads.h"

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kubeps {
namespace {

struct Seen {
  std::mutex mutex;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::set<std::thread::id> threads;
};

// Runs `pool` over n elements, counting how often each element was given.
std::vector<int> Cover(UpdateThreads& pool, size_t n, Seen* seen) {
  std::vector<int> times(n, 0);
  pool.Run(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) ++times[i];  // ranges do not overlap
    std::lock_guard<std::mutex> lock(seen->mutex);
    seen->ranges.emplace_back(begin, end);
    seen->threads.insert(std::this_thread::get_id());
  });
  return times;
}

TEST(UpdateThreadsTest, ABigPartIsSplitIntoOneRangeAThreadCoveringEveryElementOnce) {
  UpdateThreads pool(4);
  const size_t n = 10 * UpdateThreads::kMinRange + 5;
  Seen seen;
  const std::vector<int> times = Cover(pool, n, &seen);
  EXPECT_EQ(times, std::vector<int>(n, 1));
  EXPECT_EQ(seen.ranges.size(), 4u);
  EXPECT_EQ(seen.threads.size(), 4u) << "each range on a thread of its own";
  EXPECT_TRUE(seen.threads.count(std::this_thread::get_id())) << "the caller takes one";
  for (const auto& [begin, end] : seen.ranges) {
    EXPECT_EQ(begin % 16, 0u) << "a range starts on a cache line of floats";
    EXPECT_GE(end - begin, UpdateThreads::kMinRange);
  }
}

TEST(UpdateThreadsTest, ASmallPartOrASingleThreadRunsWholeOnTheCaller) {
  UpdateThreads pool(4);
  Seen small;
  EXPECT_EQ(Cover(pool, 2 * UpdateThreads::kMinRange - 1, &small),
            std::vector<int>(2 * UpdateThreads::kMinRange - 1, 1));
  ASSERT_EQ(small.ranges.size(), 1u) << "fewer than two ranges' worth: not split";
  EXPECT_EQ(*small.threads.begin(), std::this_thread::get_id());

  // Three ranges' worth on four threads: three ranges, one helper idle.
  Seen three;
  Cover(pool, 3 * UpdateThreads::kMinRange, &three);
  EXPECT_EQ(three.ranges.size(), 3u);

  UpdateThreads alone(1);
  Seen one;
  Cover(alone, 10 * UpdateThreads::kMinRange, &one);
  EXPECT_EQ(one.ranges.size(), 1u);
  EXPECT_EQ(alone.threads(), 1);
}

TEST(UpdateThreadsTest, AnUpdateWhileTheHelpersAreBusyRunsWholeOnItsOwnThread) {
  UpdateThreads pool(2);
  const size_t n = 4 * UpdateThreads::kMinRange;
  std::promise<void> first_started, second_done;
  std::atomic<bool> first_seen{false};
  // The first update's caller range waits until the second update is done.
  std::thread first([&] {
    pool.Run(n, [&](size_t begin, size_t) {
      if (begin == 0 && !first_seen.exchange(true)) {
        first_started.set_value();
        second_done.get_future().wait();
      }
    });
  });
  first_started.get_future().wait();
  Seen seen;
  EXPECT_EQ(Cover(pool, n, &seen), std::vector<int>(n, 1));
  EXPECT_EQ(seen.ranges.size(), 1u) << "not split: the helpers belong to the first update";
  second_done.set_value();
  first.join();
}

TEST(UpdateThreadsTest, ManyUpdatesInARowEachCoverEveryElementOnce) {
  UpdateThreads pool(3);
  for (int k = 0; k < 300; ++k) {
    const size_t n = (k % 7) * UpdateThreads::kMinRange + static_cast<size_t>(k);
    Seen seen;
    ASSERT_EQ(Cover(pool, n, &seen), std::vector<int>(n, 1)) << "update " << k;
  }
}

}  // namespace
}  // namespace kubeps
