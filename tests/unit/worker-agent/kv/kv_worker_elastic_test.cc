// The KV client of an elastic job, against a real scheduler and shards in one
// process: what a worker hears once the job has stopped, wherever it waits.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/worker-agent/kv/kv_test_job.h"
#include "worker-agent/kv/kv_worker.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using namespace kv_testing;
using ::testing::HasSubstr;

// The scheduler's verdict once worker-1 is gone: the job may not go below
// its 2 workers.
constexpr char kStopped[] =
    "worker-1 (rank 1) has been gone for 300 ms (elasticPolicy.replaceTimeoutSeconds)";

JobOptions ElasticJob() {
  JobOptions options;
  options.elastic.elastic = true;
  options.elastic.initial_workers = options.elastic.min_workers = kWorkers;
  options.elastic.max_workers = kWorkers + 1;
  options.elastic.global_batch = 64;
  options.elastic.replace_timeout_ms = 300;
  return options;
}

void Elastic(KVOptions* options) { options->elastic = true; }

// The job with its two workers started; the test then loses workers_[1].
class KVWorkerElasticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(job_.ok()) << job_.error();
    workers_ = StartWorkers(job_, kWorkers, Elastic);
    ASSERT_EQ(workers_.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  }
  Job job_{ElasticJob()};
  std::vector<std::unique_ptr<KVWorker>> workers_;
};

// A worker waiting to be taken in asks who computes its step again and again:
// once the job has stopped, the answer is why, not "not this one" for ever
// (before, it waited until its process was stopped from outside).
TEST_F(KVWorkerElasticTest, AWorkerWaitingToBeTakenInHearsTheJobStopped) {
  // A third registers once the job has its two.
  KVOptions third = job_.WorkerOptions(kWorkers);
  Elastic(&third);
  std::unique_ptr<KVWorker> waiting;
  ASSERT_TRUE(KVWorker::Start(third, &waiting).ok());
  StepMembership share;
  Status answer = waiting->Membership(0, &share);
  ASSERT_TRUE(answer.ok()) << answer.message();
  EXPECT_FALSE(share.member) << "the job was not scaled up: the third worker waits";
  EXPECT_FALSE(share.next_member_step.has_value());

  workers_[1].reset();  // gone without a word
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (answer.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    answer = waiting->Membership(0, &share);
  }
  ASSERT_FALSE(answer.ok()) << "the waiting worker never heard the job stopped";
  EXPECT_THAT(answer.message(), HasSubstr(kStopped));
}

// A worker at the last barrier, whose peer will never come, hears why
// instead of waiting out the peer wait limit and saying the barrier was not
// released.
TEST_F(KVWorkerElasticTest, AWorkerAtABarrierHearsTheJobStopped) {
  auto at_barrier = std::async(std::launch::async, [&] { return workers_[0]->Barrier("end"); });
  workers_[1].reset();
  ASSERT_EQ(at_barrier.wait_for(8s), std::future_status::ready) << "still at the barrier";
  const Status ended = at_barrier.get();
  EXPECT_FALSE(ended.ok());
  EXPECT_THAT(ended.message(), HasSubstr(kStopped));
}

// A push to a server that answers nothing waits for it to come back, but
// not once the job has stopped: the worker says the job's reason, not the
// server's silence.
TEST_F(KVWorkerElasticTest, APushWaitingOnASilentServerSaysWhyTheJobStopped) {
  std::vector<WorkerTensors> tensors;
  for (int w = 0; w < kWorkers; ++w) tensors.emplace_back(w);
  ASSERT_EQ(InitAll(workers_, tensors), "");

  job_.StopShard(0);
  tensors[0].SetGrads(0, 0);
  auto push = std::async(std::launch::async, [&] {
    return workers_[0]->Wait(workers_[0]->Push(tensors[0].grad_ptrs, 0));
  });
  workers_[1].reset();
  ASSERT_EQ(push.wait_for(8s), std::future_status::ready) << "the push still waits";
  const Status pushed = push.get();
  EXPECT_FALSE(pushed.ok());
  EXPECT_THAT(pushed.message(), HasSubstr(kStopped));
}

// A push through shared memory the server cannot read is sent again over
// TCP, but not once the job has stopped: the stop is the answer, and a push
// that goes on over the wire after it costs a tensor's bytes for nothing.
TEST(KVWorkerStoppedJobTest, AStagedPushRefusedAfterTheJobStoppedIsNotSentAgain) {
  Job job{ElasticJob()};
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers =
      StartWorkers(job, kWorkers, [](KVOptions* options) {
        Elastic(options);
        options->shared_memory = true;
      });
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  std::vector<WorkerTensors> tensors;
  for (int w = 0; w < kWorkers; ++w) tensors.emplace_back(w);
  ASSERT_EQ(InitAll(workers, tensors), "");
  UnlinkSegments(SegmentPrefix(job.WorkerOptions(0)));  // the shards cannot map worker 0's
  workers[1].reset();
  const Status ended = workers[0]->Barrier("end");
  ASSERT_THAT(ended.message(), HasSubstr(kStopped));
  const double applied = job.AppliedPushes();
  tensors[0].SetGrads(0, 0);
  const Status pushed = workers[0]->Wait(workers[0]->Push(tensors[0].grad_ptrs, 0));
  EXPECT_FALSE(pushed.ok());
  EXPECT_THAT(pushed.message(), HasSubstr(kStopped));
  EXPECT_EQ(job.AppliedPushes(), applied) << "sent again over TCP after the job stopped";
}

}  // namespace
}  // namespace kubeps
