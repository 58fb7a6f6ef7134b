// PushPull end to end (ParameterServer.PushPull): one call per batch whose
// pull waits at most pull_wait_ms, and a late peer's step pulled after it.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/worker-agent/kv/kv_test_job.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using namespace kv_testing;

// Starts a worker, declares its tensors and sets their gradients of step 0;
// "" or what failed.
std::string StartAtStep0(const KVOptions& options, std::unique_ptr<KVWorker>* kv,
                         std::unique_ptr<WorkerTensors>* tensors) {
  if (Status s = KVWorker::Start(options, kv); !s.ok()) return "Start: " + s.message();
  *tensors = std::make_unique<WorkerTensors>((*kv)->rank());
  (*tensors)->SetGrads((*kv)->rank(), 0);
  if (Status s = (*kv)->InitTensors((*tensors)->init_ptrs, kSizes); !s.ok())
    return "InitTensors: " + s.message();
  return "";
}

// PushPull is one call per batch (ParameterServer.PushPull) whose pull waits
// at most pull_wait_ms (100 ms here). A peer 600 ms late leaves worker 0's
// calls unanswered: its push is applied once, and its pull goes on as Pull
// calls until the step completes. Unmappable: the shards cannot map the
// workers' segments, and the first request each sees is a PushPull, whose
// push is refused unread and sent again, the same id, with its bytes.
class KVWorkerPushPullTest : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Transport, KVWorkerPushPullTest,
                         ::testing::Values("tcp", "shared", "unmappable"));

TEST_P(KVWorkerPushPullTest, ALatePeersStepIsPulledAfterTheCallsLongPollSlice) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const bool unmappable = GetParam() == "unmappable";
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = GetParam() != "tcp";
    workers.push_back(std::async(std::launch::async, [options, unmappable]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      std::unique_ptr<WorkerTensors> owned;
      if (std::string failed = StartAtStep0(options, &kv, &owned); !failed.empty()) return failed;
      WorkerTensors& tensors = *owned;
      const int rank = kv->rank();
      if (unmappable) UnlinkSegments(SegmentPrefix(options));
      if (rank == 1) std::this_thread::sleep_for(600ms);
      const auto start = std::chrono::steady_clock::now();
      uint64_t version = 0;
      if (Status s =
              kv->WaitWithVersion(kv->PushPull(tensors.grad_ptrs, tensors.value_ptrs, 0), &version);
          !s.ok()) {
        return "PushPull: " + s.message();
      }
      if (rank == 0 && std::chrono::steady_clock::now() - start < 400ms)
        return "worker 0's PushPull returned before its peer pushed";
      if (version != 1) return "PushPull's values are of version " + std::to_string(version);
      if (std::string wrong = CheckValues(tensors, 1); !wrong.empty()) return wrong;
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 30s);
  // Each worker's push of each part applied once: every part at version 1.
  for (int server = 0; server < kServers; ++server) {
    for (uint32_t k = 0; k < kSizes.size(); ++k) {
      for (uint64_t offset = 0; offset < kSizes[k]; ++offset) {
        if (job.shard(server).PartValue(k, offset).empty()) continue;
        EXPECT_EQ(job.shard(server).PartVersion(k, offset), 1u) << "key " << k << " @" << offset;
      }
    }
  }
}

// A push of tensors whose staging regions a call still uses (here a
// PushPull waiting for a late peer, and a second push of step 0, which the
// shard ignores) cannot stage them: it goes with its data, over gRPC,
// naming no segment. It once named an empty one, and the server refused it.
TEST(KVWorkerPushPullStagingTest, APushWhoseStagingIsInUseGoesWithItsData) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = true;
    workers.push_back(std::async(std::launch::async, [options]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      std::unique_ptr<WorkerTensors> owned;
      if (std::string failed = StartAtStep0(options, &kv, &owned); !failed.empty()) return failed;
      WorkerTensors& tensors = *owned;
      const int rank = kv->rank();
      if (rank == 1) std::this_thread::sleep_for(600ms);
      const KVWorker::Ticket push_pull = kv->PushPull(tensors.grad_ptrs, tensors.value_ptrs, 0);
      Status second;
      if (rank == 0) {
        std::this_thread::sleep_for(20ms);  // the PushPull is in its call's 100 ms slice
        second = kv->Wait(kv->Push(tensors.grad_ptrs, 0));
      }
      if (Status s = kv->Wait(push_pull); !s.ok()) return "PushPull: " + s.message();
      if (!second.ok()) return "the second push: " + second.message();
      if (std::string wrong = CheckValues(tensors, 1); !wrong.empty()) return wrong;
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 30s);
}

}  // namespace
}  // namespace kubeps
