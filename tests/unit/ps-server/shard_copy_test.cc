// A shard moves no tensor while it holds its lock (ps-server/shard.h): a
// pull, and other workers' pushes, go on while a push is in the middle of
// its copy or a step's update is computed; the step's last push waits for
// the others' copies before it sums them (only those that claimed the part
// before it, so a resend arriving meanwhile deadlocks nothing), and the
// result is the same bytes however the copies interleave. A push is paused
// mid-copy through PushData::BeforeEachPiece, an update inside its
// optimizer; every wait has a deadline, so a shard that holds its lock or
// deadlocks fails the test instead of hanging it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using shard_testing::Bytes;
using ::testing::HasSubstr;

constexpr uint32_t kLength = 4;  // floats per key

void Init(Shard& shard, const std::vector<uint32_t>& keys) {
  shard_testing::InitKeys(shard, keys, kLength,
                          [](uint32_t key, uint32_t i) { return key * 10.0f + i; });
}

v1::PullRequest PullOf(const std::vector<uint32_t>& keys, uint64_t min_version = 0,
                       uint32_t wait_ms = 0) {
  v1::PullRequest request;
  for (uint32_t key : keys) {
    v1::PartRef* p = request.add_parts();
    p->set_key(key);
    p->set_length(kLength);
  }
  request.set_min_version(min_version);
  request.set_wait_ms(wait_ms);
  return request;
}

bool Answered(Shard& shard, const v1::PullRequest& request) {
  PullAnswer answer;
  return shard.Pull(request, &answer).ok() && answer.ready;
}

// A push of kLength floats per key, one float per piece, so that a hook
// before each piece sees the copy under way. `hook` may be empty.
grpc::Status Push(Shard& shard, int rank, uint64_t seq, uint64_t step,
                  const std::vector<uint32_t>& keys, const std::vector<float>& grad,
                  std::function<void(size_t)> hook = {}, uint32_t contributors = 0) {
  v1::PushRequest request = shard_testing::PushOfKeys(rank, seq, step, keys, kLength);
  request.set_contributors(contributors);
  const std::string bytes = Bytes(grad);
  PushData data(shard_testing::CutInto(bytes, sizeof(float)));
  data.BeforeEachPiece(std::move(hook));
  return shard.Push(request, data);
}

std::vector<float> Gradient(int rank, uint64_t step, size_t keys) {
  std::vector<float> g;
  for (size_t i = 0; i < keys * kLength; ++i) {
    g.push_back(0.1f * static_cast<float>(rank + 1) + 0.01f * static_cast<float>(step + i));
  }
  return g;
}

TEST(ShardCopyTest, APullIsAnsweredWhileAPushIsInTheMiddleOfItsCopy) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  Init(*shard, {0, 1});
  bool answered_meanwhile = false;
  std::future<bool> pull;  // outlives the hook: a pull held up must not hold it up too
  auto hook = [&](size_t piece) {
    if (piece != 2) return;
    pull = std::async(std::launch::async, [&] { return Answered(*shard, PullOf({0})); });
    answered_meanwhile = pull.wait_for(5s) == std::future_status::ready;
  };
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {1}, Gradient(0, 0, 1), hook).ok());
  EXPECT_TRUE(pull.get());
  EXPECT_TRUE(answered_meanwhile) << "the pull waited for the push's copy: the lock was held";
}

TEST(ShardCopyTest, TwoWorkersPushesCopyInAtTheSameTime) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 3));
  Init(*shard, {0});
  std::promise<void> first_copying, second_copying;
  auto second_started = second_copying.get_future();
  bool overlapped = false;
  std::future<grpc::Status> second;
  auto first_hook = [&](size_t piece) {
    if (piece != 1) return;
    second = std::async(std::launch::async, [&] {
      return Push(*shard, 1, 0, 0, {0}, Gradient(1, 0, 1), [&](size_t p) {
        if (p == 1) second_copying.set_value();
      });
    });
    overlapped = second_started.wait_for(5s) == std::future_status::ready;
  };
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, Gradient(0, 0, 1), first_hook).ok());
  ASSERT_TRUE(second.get().ok());
  EXPECT_TRUE(overlapped) << "worker 1's push waited for worker 0's copy to end";
  ASSERT_TRUE(Push(*shard, 2, 0, 0, {0}, Gradient(2, 0, 1)).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
}

// The same pushes, one after the other, on a shard of their own: what any
// interleaving must give, bit for bit.
std::vector<float> OneAfterTheOther(int workers, const std::vector<uint32_t>& keys,
                                    uint64_t steps) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, workers));
  Init(*shard, keys);
  for (uint64_t step = 0; step < steps; ++step) {
    for (int rank = 0; rank < workers; ++rank) {
      EXPECT_TRUE(Push(*shard, rank, step, step, keys, Gradient(rank, step, keys.size())).ok());
    }
  }
  std::vector<float> values;
  for (uint32_t key : keys) {
    for (float v : shard->PartValue(key, 0)) values.push_back(v);
  }
  return values;
}

// Plain SGD (learning rate 1) that calls `during` as it updates.
class ObservedSgd : public Optimizer {
 public:
  explicit ObservedSgd(std::function<void()> during) : during_(std::move(during)) {}

 protected:
  void UpdateRange(const float* from, float* to, const float* grad, size_t begin, size_t end,
                   OptimizerState*) const override {
    if (during_) during_();
    for (size_t i = begin; i < end; ++i) to[i] = from[i] - grad[i];
  }

 private:
  std::function<void()> during_;
};

TEST(ShardCopyTest, AStepsUpdateHoldsUpNoPullOfAnotherPart) {
  bool answered_meanwhile = false;
  std::future<bool> pull;
  Shard* shard_seen = nullptr;
  auto during_update = [&] {
    pull = std::async(std::launch::async, [&] { return Answered(*shard_seen, PullOf({1})); });
    answered_meanwhile = pull.wait_for(5s) == std::future_status::ready;
  };
  Shard shard(shard_testing::PlainShardOptions(true, 1),
              std::make_unique<ObservedSgd>(during_update), &NullMetrics());
  shard_seen = &shard;
  Init(shard, {0, 1});
  ASSERT_TRUE(Push(shard, 0, 0, 0, {0}, Gradient(0, 0, 1)).ok());
  EXPECT_TRUE(pull.get());
  EXPECT_TRUE(answered_meanwhile) << "the pull waited for the update: the lock was held";
  EXPECT_EQ(shard.PartVersion(0, 0), 1u);
  EXPECT_EQ(shard.PartValue(0, 0), OneAfterTheOther(1, {0}, 1));
}

// A hook that has worker 1 push its gradient of key 0 for step 0 while
// worker 0's is half copied in, and gives it time to reach the part.
std::function<void(size_t)> SecondWorkerArrivesMidCopy(Shard& shard,
                                                       std::future<grpc::Status>* push) {
  return [&shard, push](size_t piece) {
    if (piece != 1) return;
    *push = std::async(std::launch::async,
                       [&shard] { return Push(shard, 1, 0, 0, {0}, Gradient(1, 0, 1)); });
    std::this_thread::sleep_for(50ms);
  };
}

TEST(ShardCopyTest, TheLastPushSumsTheOthersOnlyOnceTheirCopiesAreIn) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  Init(*shard, {0});
  std::future<grpc::Status> last;
  ASSERT_TRUE(
      Push(*shard, 0, 0, 0, {0}, Gradient(0, 0, 1), SecondWorkerArrivesMidCopy(*shard, &last))
          .ok());
  ASSERT_TRUE(last.get().ok());
  EXPECT_EQ(shard->PartValue(0, 0), OneAfterTheOther(2, {0}, 1));
}

TEST(ShardCopyTest, APushRefusedMidCopyLeavesTheStepToItsResend) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  Init(*shard, {0});
  std::vector<float> poisoned = Gradient(0, 0, 1);
  poisoned.back() = std::numeric_limits<float>::quiet_NaN();
  std::future<grpc::Status> other;  // the step's last, had worker 0's push not been refused
  EXPECT_EQ(
      Push(*shard, 0, 0, 0, {0}, poisoned, SecondWorkerArrivesMidCopy(*shard, &other)).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(other.get().ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 0u) << "the step waits for worker 0";
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, Gradient(0, 0, 1)).ok());
  EXPECT_EQ(shard->PartValue(0, 0), OneAfterTheOther(2, {0}, 1));
}

// Fails the test at once where the shard deadlocked (the threads stuck in
// it would hold up the test's end forever).
void ExitIfStuck(std::future<grpc::Status>& push, const char* what) {
  if (push.wait_for(10s) == std::future_status::ready) return;
  ADD_FAILURE() << what << " is stuck after 10 s: the shard deadlocked";
  std::fflush(nullptr);
  std::_Exit(1);
}

TEST(ShardCopyTest, AResendArrivingWhileAnotherPushWaitsToSumCompletesTheStep) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  Init(*shard, {0, 1});
  std::vector<float> poisoned = Gradient(0, 0, 1);
  poisoned.back() = std::numeric_limits<float>::quiet_NaN();
  std::promise<void> other_copying;
  std::future<grpc::Status> other;
  auto hook = [&](size_t piece) {
    if (piece != 1) return;
    // Worker 1 claims keys 0 and 1 while worker 0 copies key 1: it may be
    // key 1's last, and stays in its copy of key 0 until the resend below
    // has claimed key 1 too.
    other = std::async(std::launch::async, [&] {
      return Push(*shard, 1, 0, 0, {0, 1}, Gradient(1, 0, 2), [&](size_t p) {
        if (p != 0) return;
        other_copying.set_value();
        std::this_thread::sleep_for(200ms);
      });
    });
    other_copying.get_future().wait();
  };
  EXPECT_EQ(Push(*shard, 0, 0, 0, {1}, poisoned, hook).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<float> both = Gradient(0, 0, 2);
  auto resend = std::async(std::launch::async, [&] {
    return Push(*shard, 0, 0, 0, {1}, std::vector<float>(both.begin() + kLength, both.end()));
  });
  ExitIfStuck(resend, "the resend of worker 0");
  ExitIfStuck(other, "worker 1's push");
  ASSERT_TRUE(resend.get().ok());
  ASSERT_TRUE(other.get().ok());
  EXPECT_EQ(shard->PartVersion(1, 0), 1u);
  ASSERT_TRUE(
      Push(*shard, 0, 1, 0, {0}, std::vector<float>(both.begin(), both.begin() + kLength)).ok());
  std::vector<float> values = shard->PartValue(0, 0);
  for (float v : shard->PartValue(1, 0)) values.push_back(v);
  EXPECT_EQ(values, OneAfterTheOther(2, {0, 1}, 1));
}

TEST(ShardCopyTest, AGradientOneTooManyForItsStepIsRefusedAndTheStepIsSummedWithoutIt) {
  // Three workers, but each push says its step has two: worker 2 pushes as
  // well while worker 1 sums the step.
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 3));
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, Gradient(0, 0, 1), {}, 2).ok());
  grpc::Status extra;
  auto hook = [&](size_t piece) {
    if (piece != 1) return;
    auto push = std::async(std::launch::async,
                           [&] { return Push(*shard, 2, 0, 0, {0}, Gradient(2, 0, 1), {}, 2); });
    ExitIfStuck(push, "worker 2's push");
    extra = push.get();
  };
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0}, Gradient(1, 0, 1), hook, 2).ok());
  EXPECT_EQ(extra.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(extra.error_message(), HasSubstr("one too many"));
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  EXPECT_EQ(shard->PartValue(0, 0), OneAfterTheOther(2, {0}, 1));
}

// A sync shard of one worker with a checkpoint every step, at step 2, its
// checkpoint of step 1 written; its folder removed at the end.
class ShardCopyRollbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(::mkdtemp(folder_), nullptr);
    ShardOptions options = shard_testing::PlainShardOptions(true, 1);
    options.checkpoint_dir = folder_;
    options.checkpoint_interval = 1;
    shard_ = shard_testing::MakeShard(options);
    Init(*shard_, {0});
    ASSERT_TRUE(Push(*shard_, 0, 0, 0, {0}, Gradient(0, 0, 1)).ok());
    at_step_1_ = shard_->PartValue(0, 0);
    ASSERT_TRUE(Push(*shard_, 0, 1, 1, {0}, Gradient(0, 1, 1)).ok());  // step 1's checkpoint
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  char folder_[32] = "/tmp/kubeps-shard-copy-XXXXXX";
  std::unique_ptr<Shard> shard_;
  std::vector<float> at_step_1_;
};

TEST_F(ShardCopyRollbackTest,
       ARollbackWaitsForAPushInTheMiddleOfItsCopyAndThenRefusesItsGeneration) {
  Shard* shard = shard_.get();
  std::future<Status> rollback;
  bool waited = false;
  auto hook = [&](size_t piece) {
    if (piece != 1) return;
    rollback = std::async(std::launch::async, [&] { return shard->RestoreCheckpoint(1, 1); });
    waited = rollback.wait_for(200ms) == std::future_status::timeout;
  };
  ASSERT_TRUE(Push(*shard, 0, 2, 2, {0}, Gradient(0, 2, 1), hook).ok());
  ASSERT_EQ(rollback.wait_for(10s), std::future_status::ready);
  Status rolled_back = rollback.get();
  ASSERT_TRUE(rolled_back.ok()) << rolled_back.message();
  EXPECT_TRUE(waited) << "the shard was rolled back under a push that was copying in";
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  EXPECT_EQ(shard->PartValue(0, 0), at_step_1_);
  EXPECT_EQ(Push(*shard, 0, 2, 1, {0}, Gradient(0, 1, 1)).error_code(), grpc::StatusCode::ABORTED)
      << "a push of the generation before the rollback";
  shard->DrainCheckpoints();  // step 2's, taken by the push the rollback waited for
}

// A push checked before a rollback, let in after it and refused for the
// generation before, was not applied: it is not recorded as applied either
// (before, it was, in the restored exactly-once table and in every
// checkpoint after), so a resend of it can never be answered as applied.
TEST_F(ShardCopyRollbackTest, APushRefusedForTheGenerationBeforeIsNotRecordedAsApplied) {
  Shard* shard = shard_.get();
  std::future<grpc::Status> late;
  std::future<Status> rollback;
  auto hook = [&](size_t piece) {
    if (piece != 1) return;
    // Checked now; it waits for this push's copy, then for the rollback.
    late = std::async(std::launch::async,
                      [&] { return Push(*shard, 0, 3, 2, {0}, Gradient(0, 2, 1)); });
    std::this_thread::sleep_for(100ms);
    rollback = std::async(std::launch::async, [&] { return shard->RestoreCheckpoint(1, 1); });
    rollback.wait_for(200ms);
  };
  ASSERT_TRUE(Push(*shard, 0, 2, 2, {0}, Gradient(0, 2, 1), hook).ok());
  ASSERT_EQ(rollback.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(rollback.get().ok());
  EXPECT_EQ(late.get().error_code(), grpc::StatusCode::ABORTED);
  shard->DrainCheckpoints();
  EXPECT_FALSE(shard->dedup().Settled("worker-0", 3));
}

TEST(ShardCopyTest, WorkersPushingAtOnceEndOnTheBytesOfPushesOneAfterTheOther) {
  constexpr int kWorkers = 4;
  constexpr uint64_t kSteps = 40;
  const std::vector<uint32_t> keys = {0, 1, 2};
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, kWorkers));
  Init(*shard, keys);
  std::vector<std::thread> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers.emplace_back([&, rank] {
      std::mt19937 random(rank);
      for (uint64_t step = 0; step < kSteps; ++step) {
        // Each worker its own order of keys and its own pauses mid-copy.
        std::vector<uint32_t> order = keys;
        std::shuffle(order.begin(), order.end(), random);
        for (uint32_t key : order) {
          std::vector<float> g = Gradient(rank, step, keys.size());
          std::vector<float> mine(g.begin() + key * kLength, g.begin() + (key + 1) * kLength);
          const uint64_t pause_us = random() % 200;
          EXPECT_TRUE(Push(*shard, rank, step * keys.size() + key, step, {key}, mine, [&](size_t) {
                        std::this_thread::sleep_for(pause_us * 1us);
                      }).ok());
        }
        // The step's update, as a worker waits for it.
        EXPECT_TRUE(Answered(*shard, PullOf(keys, step + 1, 20000)));
      }
    });
  }
  for (auto& worker : workers) worker.join();
  std::vector<float> values;
  for (uint32_t key : keys) {
    for (float v : shard->PartValue(key, 0)) values.push_back(v);
  }
  EXPECT_EQ(values, OneAfterTheOther(kWorkers, keys, kSteps));
}

}  // namespace
}  // namespace kubeps
