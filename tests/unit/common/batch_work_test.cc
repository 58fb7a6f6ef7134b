// RunAsBatchWork and RunAsOrdinaryWork set the calling thread's policy, and
// the threads it starts afterwards inherit it: how a process's threads of
// exchange end up as batch work and its computing ones as ordinary work.
#include "common/batch_work.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace kubeps {
namespace {

int PolicyOfAThreadStartedNow() {
  int policy = -1;
  std::thread([&] { policy = sched_getscheduler(0); }).join();
  return policy;
}

TEST(BatchWorkTest, ACallingThreadAndTheThreadsItStartsLaterTakeThePolicy) {
  // On a thread of its own, so that the test's main thread keeps its policy.
  std::thread([] {
    ASSERT_TRUE(RunAsBatchWork().ok());
    EXPECT_EQ(sched_getscheduler(0), SCHED_BATCH);
    EXPECT_EQ(PolicyOfAThreadStartedNow(), SCHED_BATCH);

    ASSERT_TRUE(RunAsOrdinaryWork().ok());
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
    EXPECT_EQ(PolicyOfAThreadStartedNow(), SCHED_OTHER);
  }).join();
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

}  // namespace
}  // namespace kubeps
