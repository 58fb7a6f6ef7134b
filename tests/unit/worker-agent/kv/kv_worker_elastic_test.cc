// The KV client of an elastic job, against a real scheduler and shards in one
// process: what a worker that is not one of a step's workers hears.
#include <chrono>
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

// A worker waiting to be taken in asks who computes its step again and again:
// once the job has stopped, the answer is why, not "not this one" for ever
// (before, it waited until its process was stopped from outside).
TEST(KVWorkerElasticTest, AWorkerWaitingToBeTakenInHearsTheJobStopped) {
  JobOptions options;
  options.elastic.elastic = true;
  options.elastic.initial_workers = options.elastic.min_workers = kWorkers;
  options.elastic.max_workers = kWorkers + 1;
  options.elastic.global_batch = 64;
  options.elastic.replace_timeout_ms = 300;
  Job job(options);
  ASSERT_TRUE(job.ok()) << job.error();
  auto elastic = [](KVOptions* o) { o->elastic = true; };
  std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job, kWorkers, elastic);
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  // A third registers once the job has its two.
  KVOptions third = job.WorkerOptions(kWorkers);
  elastic(&third);
  std::unique_ptr<KVWorker> late;
  ASSERT_TRUE(KVWorker::Start(third, &late).ok());
  KVWorker& waiting = *late;
  StepMembership share;
  Status answer = waiting.Membership(0, &share);
  ASSERT_TRUE(answer.ok()) << answer.message();
  EXPECT_FALSE(share.member) << "the job was not scaled up: the third worker waits";
  EXPECT_FALSE(share.next_member_step.has_value());

  workers[1].reset();  // gone without a word, and the job may not go below 2
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (answer.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    answer = waiting.Membership(0, &share);
  }
  ASSERT_FALSE(answer.ok()) << "the waiting worker never heard the job stopped";
  EXPECT_THAT(answer.message(), HasSubstr("worker-1 (rank 1) has been gone for 300 ms (elasticPolicy.replaceTimeoutSeconds)"));
}

}  // namespace
}  // namespace kubeps
