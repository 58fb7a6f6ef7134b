// The KV client end to end, in one process: a scheduler and two parameter
// server shards on real gRPC servers (127.0.0.1, ephemeral ports), and two
// KVWorker clients in two threads training a few sync steps with SGD
// (learning rate 1), so every expected parameter is plain arithmetic.
// Also the ResendCaller's bounded failure against a dead address.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/optimizer.h"
#include "common/resend.h"
#include "common/termination_message.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/ps_service.h"
#include "ps-server/scheduler_service.h"
#include "ps-server/shard.h"
#include "tests/unit/worker-agent/kv/kv_test_job.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/segment_file.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using namespace kv_testing;
using ::testing::HasSubstr;
using ::testing::Not;

struct WorkerResult {
  std::vector<std::string> errors;
  int rank = -1;
  int size = 0;
  int num_servers = 0;
  std::vector<Part> parts;
  std::pair<int, int> placed;  // keys whose values, gradients lie in shared memory
  std::vector<std::vector<float>> after_init;
  std::vector<std::vector<std::vector<float>>> after_step;  // [step][key][i]
};

#define CHECK_OK(expr, what)                                            \
  do {                                                                  \
    Status _s = (expr);                                                 \
    if (!_s.ok()) {                                                     \
      result.errors.push_back(std::string(what) + ": " + _s.message()); \
      return result;                                                    \
    }                                                                   \
  } while (0)

WorkerResult RunWorker(const KVOptions& options, bool unmappable = false, bool in_place = false) {
  WorkerResult result;
  std::unique_ptr<KVWorker> kv;
  CHECK_OK(KVWorker::Start(options, &kv), "Start");
  result.rank = kv->rank();
  result.size = kv->size();
  result.num_servers = kv->num_servers();
  const int rank = kv->rank();

  WorkerTensors tensors(rank);
  const auto& grad_ptrs = tensors.grad_ptrs;
  const auto& value_ptrs = tensors.value_ptrs;
  CHECK_OK(kv->InitTensors(tensors.init_ptrs, kSizes), "InitTensors");
  if (in_place) result.placed = tensors.Place(kv.get());
  if (unmappable) UnlinkSegments(SegmentPrefix(options));
  result.parts = kv->parts();
  // Unmappable: the first request to each shard is a push, so that it is the
  // push that finds out (a pull would, and no push would offer the segment).
  if (!unmappable) {
    CHECK_OK(kv->Wait(kv->Pull(value_ptrs, 0)), "Pull 0");
    result.after_init = tensors.Values();
  }

  for (int step = 0; step < kSteps; ++step) {
    tensors.SetGrads(rank, step);
    if (step < kSteps - 1) {
      CHECK_OK(kv->Wait(kv->Push(grad_ptrs, step)), "Push");
      CHECK_OK(kv->Wait(kv->Pull(value_ptrs, step + 1)), "Pull");
    } else {
      CHECK_OK(kv->Wait(kv->PushPull(grad_ptrs, value_ptrs, step)), "PushPull");
    }
    result.after_step.push_back(tensors.Values());
  }
  // Selecting keys: a null pointer leaves a key out. The version pulled is
  // the step the parameters are of (what a restarted process resumes from).
  std::vector<float> only_key2(1, 0.0f);
  uint64_t version = 0;
  CHECK_OK(kv->WaitWithVersion(kv->Pull({nullptr, nullptr, only_key2.data()}, 0), &version),
           "Pull key 2");
  if (only_key2[0] != Expected(2, 0, kSteps))
    result.errors.push_back("Pull of key 2 alone is wrong");
  if (version != static_cast<uint64_t>(kSteps)) {
    result.errors.push_back("Pull of key 2 reports version " + std::to_string(version) + ", want " +
                            std::to_string(kSteps));
  }

  if (std::string ended = EndWorker(kv.get()); !ended.empty()) result.errors.push_back(ended);
  return result;
}

// Every gradient here is exact in 16 bits, so the 16-bit encodings of
// spec.compression, through the real wire, end at the very same numbers.
// So do the transports: gRPC alone (each part a request, or parts
// together up to a bound, tcp_pairs), shared memory (the shards are on
// 127.0.0.1), shared memory the shards cannot map (the worker's first push
// to each is refused unread and sent again over gRPC, the same id), and
// shared memory with the worker's tensors in its segment (a model that
// lives there: nothing is copied in the worker; gradients only where
// pushes are float32, whose staging holds float32).
class KVWorkerTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};
INSTANTIATE_TEST_SUITE_P(
    CompressionAndTransport, KVWorkerTest,
    ::testing::Combine(::testing::Values("none", "bf16", "fp16"),
                       ::testing::Values("tcp", "tcp_pairs", "shared", "unmappable", "in_place")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST_P(KVWorkerTest, TwoWorkersTrainSyncStepsAgainstTwoShards) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const bool unmappable = std::get<1>(GetParam()) == "unmappable";
  auto start = std::chrono::steady_clock::now();
  std::vector<std::future<WorkerResult>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    const auto& [compression, transport] = GetParam();
    options.compression = compression;
    options.shared_memory = transport != "tcp" && transport != "tcp_pairs";
    if (transport == "tcp_pairs") options.tcp_request_elems = 5;
    const bool in_place = transport == "in_place";
    workers.push_back(std::async(std::launch::async, [options, unmappable, in_place] {
      return RunWorker(options, unmappable, in_place);
    }));
  }
  std::vector<WorkerResult> results;
  for (auto& f : workers) {
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready) << "a worker hung";
    results.push_back(f.get());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);

  std::set<int> ranks;
  for (const WorkerResult& r : results) {
    for (const auto& e : r.errors) ADD_FAILURE() << "worker " << r.rank << ": " << e;
    if (!r.errors.empty()) continue;
    ranks.insert(r.rank);
    EXPECT_EQ(r.size, kWorkers);
    EXPECT_EQ(r.num_servers, kServers);
    if (std::get<1>(GetParam()) == "in_place") {
      const int keys = static_cast<int>(kSizes.size());
      EXPECT_EQ(r.placed, std::make_pair(keys, std::get<0>(GetParam()) == "none" ? keys : 0));
    }

    // Initial values: rank 0's, for both workers.
    ASSERT_EQ(r.after_init.size(), unmappable ? 0 : kSizes.size());
    for (uint32_t k = 0; k < r.after_init.size(); ++k) {
      for (uint64_t i = 0; i < kSizes[k]; ++i) {
        EXPECT_EQ(r.after_init[k][i], Initial(0, k, i))
            << "rank " << r.rank << " key " << k << " [" << i << "]";
      }
    }
    // After every step: w0 - sum of the mean gradients.
    ASSERT_EQ(r.after_step.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        for (uint64_t i = 0; i < kSizes[k]; ++i) {
          EXPECT_EQ(r.after_step[s][k][i], Expected(k, i, s + 1))
              << "rank " << r.rank << " step " << s << " key " << k << " [" << i << "]";
        }
      }
    }

    // Tensor 1 is sliced over both servers and chunked; the others are whole.
    std::set<int> servers_of_key1;
    int chunks_of_key1 = 0;
    for (const Part& p : r.parts) {
      EXPECT_LE(p.length, 3u);
      if (p.key == 1) {
        servers_of_key1.insert(p.server);
        ++chunks_of_key1;
      }
    }
    EXPECT_EQ(servers_of_key1, (std::set<int>{0, 1}));
    EXPECT_GE(chunks_of_key1, 4);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_TRUE(job.scheduler().scheduler().AllWorkersFinished());

  // The shards hold the same numbers, each its own slice, at version kSteps.
  if (!results.empty() && results[0].errors.empty()) {
    int parts_per_shard[kServers] = {0, 0};
    for (const Part& p : results[0].parts) {
      Shard& shard = job.shard(p.server);
      EXPECT_EQ(shard.PartVersion(p.key, p.offset), static_cast<uint64_t>(kSteps));
      std::vector<float> stored = shard.PartValue(p.key, p.offset);
      ASSERT_EQ(stored.size(), p.length)
          << "key " << p.key << " offset " << p.offset << " on server " << p.server;
      for (uint64_t j = 0; j < p.length; ++j)
        EXPECT_EQ(stored[j], Expected(p.key, p.offset + j, kSteps));
      // Each part lives on exactly one shard.
      EXPECT_TRUE(job.shard(1 - p.server).PartValue(p.key, p.offset).empty())
          << "key " << p.key << " offset " << p.offset << " is on both shards";
      ++parts_per_shard[p.server];
    }
    EXPECT_GT(parts_per_shard[0], 0);
    EXPECT_GT(parts_per_shard[1], 0);
  }
  // Every push touches both shards. Over TCP its parts go in requests of at
  // most tcp_request_elems: one a part where the bound is the part's (3),
  // and with 5, shard 0's parts of 3, 2, 3, 2 and 3 elements go as [3, 2],
  // [3, 2], [3], shard 1's of 2, 3, 2, 3 and 1 as [2, 3], [2, 3], [1]: three
  // a shard. Through shared memory, once the shards map the segment, one.
  const double one_per_shard = kWorkers * kServers * kSteps;
  const std::string& transport = std::get<1>(GetParam());
  if (transport == "tcp") {
    EXPECT_EQ(job.AppliedPushes(), 5 * one_per_shard);
  } else if (transport == "tcp_pairs") {
    EXPECT_EQ(job.AppliedPushes(), 3 * one_per_shard);
  } else if (transport == "shared" || transport == "in_place") {
    EXPECT_EQ(job.AppliedPushes(), one_per_shard);
  } else {
    EXPECT_GT(job.AppliedPushes(), one_per_shard);
  }
}

// The pod's agent lays a program's tensors out in the KV client's segment at
// the session's declare, before InitTensors (segment_file.h): the regions are
// there at once, InitTensors keeps them, and so does a restarted program's
// declare of the same tensors. A client that reaches its servers over TCP
// alone has no segment to offer.
TEST(KVWorkerSegmentTest, TensorsLaidOutBeforeInitStayWhereTheyAre) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = w == 0;  // worker 1: TCP only
    workers.push_back(std::async(std::launch::async, [options]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
      const std::optional<SegmentFile> segment = PrepareSegment(kv.get(), kSizes);
      if (!options.shared_memory) {
        if (segment) return "a TCP-only client offered a segment";
      } else if (!segment || segment->path.rfind("/dev/shm/kubeps-", 0) != 0) {
        return "no segment in /dev/shm: " + (segment ? segment->path : std::string("none"));
      }
      std::vector<float*> laid_out;
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        float* values = kv->SharedValues(k);
        if (segment &&
            (reinterpret_cast<char*>(values) < segment->base ||
             reinterpret_cast<char*>(values + kSizes[k]) > segment->base + segment->bytes)) {
          return "key " + std::to_string(k) + "'s values lie outside the segment";
        }
        laid_out.push_back(values);
      }
      WorkerTensors tensors(kv->rank());
      if (Status s = kv->InitTensors(tensors.init_ptrs, kSizes); !s.ok())
        return "InitTensors: " + s.message();
      const std::optional<SegmentFile> again = PrepareSegment(kv.get(), kSizes);
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        if (kv->SharedValues(k) != laid_out[k]) return "InitTensors moved key " + std::to_string(k);
      }
      if (segment && (!again || again->path != segment->path))
        return "a second declare of the same tensors got another segment";
      if (segment) {
        tensors.Place(kv.get());
        if (Status s = kv->Wait(kv->Pull(tensors.value_ptrs, 0)); !s.ok())
          return "Pull: " + s.message();
        for (uint32_t k = 0; k < kSizes.size(); ++k) {
          for (uint64_t i = 0; i < kSizes[k]; ++i) {
            if (laid_out[k][i] != Initial(0, k, i)) return "rank 0's values did not land";
          }
        }
      }
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 30s);
}

// A model of many small tensors, each server holding more parts than one
// request may name: through shared memory, where a batch may hold 8M
// elements, the KV client still closes it at the servers' bound of parts
// (a server refuses a request past it, an Init too).
TEST(KVWorkerBatchTest, AServerHoldingMorePartsThanOneRequestMayNameIsServed) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const size_t tensors = 2 * kMaxPartsPerRequest + 10;  // about half on each server
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = true;
    workers.push_back(std::async(std::launch::async, [options, tensors]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
      std::vector<float> init(tensors), grads(tensors, kv->rank() + 1.0f), values(tensors, -1);
      std::vector<const float*> init_ptrs, grad_ptrs;
      std::vector<float*> value_ptrs;
      for (size_t k = 0; k < tensors; ++k) {
        init[k] = static_cast<float>(k);
        init_ptrs.push_back(&init[k]);
        grad_ptrs.push_back(&grads[k]);
        value_ptrs.push_back(&values[k]);
      }
      if (Status s = kv->InitTensors(init_ptrs, std::vector<uint64_t>(tensors, 1)); !s.ok())
        return "InitTensors: " + s.message();
      if (Status s = kv->Wait(kv->PushPull(grad_ptrs, value_ptrs, 0)); !s.ok())
        return "PushPull: " + s.message();
      // SGD, learning rate 1, the mean of 1 and 2.
      for (size_t k = 0; k < tensors; ++k) {
        if (values[k] != static_cast<float>(k) - 1.5f)
          return "tensor " + std::to_string(k) + " is " + std::to_string(values[k]);
      }
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 60s);
}

// Workers started against `job`, or none where one failed to.
// Rank 0 says where the placement leaves a server without a part (it
// checkpoints nothing): tensors too small to slice over every server.
TEST(KVWorkerPlacementTest, AServerWithoutAPartIsSaidAtInit) {
  auto init = [](const std::vector<uint64_t>& sizes) {
    Job job;
    EXPECT_TRUE(job.ok()) << job.error();
    std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job);
    EXPECT_EQ(workers.size(), static_cast<size_t>(kWorkers));
    ::testing::internal::CaptureStderr();
    std::vector<std::future<Status>> inits;
    std::vector<float> values(8, 1.0f);
    for (auto& kv : workers) {
      inits.push_back(std::async(std::launch::async, [&kv, &values, sizes] {
        return kv->InitTensors(std::vector<const float*>(sizes.size(), values.data()), sizes);
      }));
    }
    for (auto& f : inits) EXPECT_TRUE(f.get().ok());
    const std::string said = ::testing::internal::GetCapturedStderr();
    std::vector<std::future<std::string>> ends;
    for (auto& kv : workers) {
      ends.push_back(std::async(std::launch::async, [&kv] { return EndWorker(kv.get()); }));
    }
    for (auto& end : ends) EXPECT_EQ(end.get(), "");
    return said;
  };
  const std::string one_scalar = init({1});
  EXPECT_THAT(one_scalar, HasSubstr("warning: 1 of the job's 2 servers hold no part of the model"));
  EXPECT_THAT(one_scalar, HasSubstr("lower replicaSpecs.ps.replicas to 1"));
  // Two elements: sliced, one on each server.
  EXPECT_THAT(init({2}), ::testing::Not(HasSubstr("hold no part")));
}

// The newest step both shards hold a checkpoint of reaches the workers with
// the scheduler's heartbeats: a program keeps no copy of its state older.
TEST(KVWorkerCheckpointsTest, TheNewestCommonCheckpointComesWithTheHeartbeats) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job);
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  for (const auto& kv : workers) EXPECT_EQ(kv->NewestCommonCheckpoint(), -1) << "none written yet";
  for (const auto& [server, steps] : std::vector<std::pair<std::string, std::vector<uint64_t>>>{
           {"server-0", {100, 200, 300}}, {"server-1", {100, 200}}}) {
    v1::HeartbeatRequest beat;
    beat.set_node_id(server);
    beat.set_incarnation(1);
    for (uint64_t step : steps) beat.add_checkpoint_steps(step);
    v1::HeartbeatResponse answer;
    ASSERT_TRUE(job.scheduler().scheduler().Heartbeat(&beat, &answer).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (const auto& kv : workers) {
    while (kv->NewestCommonCheckpoint() != 200 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    EXPECT_EQ(kv->NewestCommonCheckpoint(), 200);
  }
  std::vector<std::future<std::string>> ending;
  for (auto& kv : workers)
    ending.push_back(std::async(std::launch::async, [&kv] { return EndWorker(kv.get()); }));
  ExpectWorkersSucceed(&ending, 30s);
}

// Both shards say they hold `steps` (at once, and again every 10 ms until
// `done`), and that they restored every generation the scheduler opens.
std::thread ShardsThatRestoreAtOnce(Job& job, std::vector<uint64_t> steps,
                                    std::atomic<bool>* done) {
  auto beat = [&job, steps](uint64_t* generation) {
    for (const char* server : {"server-0", "server-1"}) {
      v1::HeartbeatRequest request;
      request.set_node_id(server);
      request.set_incarnation(1);
      request.set_restored_generation(*generation);
      for (uint64_t step : steps) request.add_checkpoint_steps(step);
      v1::HeartbeatResponse answer;
      if (job.scheduler().scheduler().Heartbeat(&request, &answer).ok())
        *generation = std::max(*generation, answer.generation());
    }
  };
  uint64_t generation = 0;
  beat(&generation);
  return std::thread([beat, generation, done]() mutable {
    while (!*done) {
      std::this_thread::sleep_for(10ms);
      beat(&generation);
    }
  });
}

// With the servers' optimizer none a restarted program can start only at a
// step it saved: one killed before its save of the servers' newest
// checkpoint step asks, through its agent's heartbeats, for the job to go
// back to the newest step it and every shard hold.
TEST(KVWorkerHeldStateTest, TheJobGoesBackToTheNewestStepTheProgramAndEveryShardHold) {
  JobOptions options;
  options.workers_keep_parameters = true;
  Job job(options);
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job);
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  std::atomic<bool> done{false};
  std::thread shards = ShardsThatRestoreAtOnce(job, {50, 100}, &done);
  uint64_t resume = 0;
  Status s = workers[0]->RollBackToHeldState(100, {0, 50}, &resume);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(resume, 50u);
  // Every worker goes back there, once its heartbeats have said so.
  uint64_t other = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (other != 50 && std::chrono::steady_clock::now() < deadline) {
    EXPECT_TRUE(workers[1]->Recover(&other).ok());
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(other, 50u);

  // Now it holds only a step no shard holds: the scheduler's verdict.
  s = workers[0]->RollBackToHeldState(50, {30}, &resume);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("worker-0's program holds its own state of steps 30, not "
                                     "of step 50 where the job is"));
  done = true;
  shards.join();
}

// An async worker's steps are its own (the servers' versions count every
// worker's updates): a restarted process goes on after the step its
// predecessor pushed last with success, as its heartbeats said. Before, it
// started at 0 and computed every step again.
TEST(KVWorkerAsyncTest, ARestartedWorkerGoesOnAfterTheStepItsPredecessorPushedLast) {
  JobOptions options;
  options.async = true;
  options.replace_silent_after_ms = 200;
  Job job(options);
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers =
      StartWorkers(job, kWorkers, [](KVOptions* o) { o->async = true; });
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  std::vector<std::unique_ptr<WorkerTensors>> tensors;
  std::vector<std::future<Status>> declared;
  for (int w = 0; w < kWorkers; ++w) {
    tensors.push_back(std::make_unique<WorkerTensors>(w));
    declared.push_back(std::async(std::launch::async, [&, w] {
      return workers[w]->InitTensors(tensors[w]->init_ptrs, kSizes);
    }));
  }
  for (auto& d : declared) ASSERT_TRUE(d.get().ok());
  uint64_t step = 99;
  ASSERT_TRUE(workers[0]->Recover(&step).ok());
  EXPECT_EQ(step, 0u) << "a new worker";
  for (int s = 0; s < 5; ++s) {
    tensors[0]->SetGrads(0, s);
    ASSERT_TRUE(workers[0]->Wait(workers[0]->Push(tensors[0]->grad_ptrs, s)).ok());
  }
  ASSERT_TRUE(workers[0]->Recover(&step).ok());
  EXPECT_EQ(step, 5u) << "a program restarted beside the same agent goes on after step 4";
  std::this_thread::sleep_for(300ms);  // a beat says it
  workers[0].reset();                  // the process dies
  KVOptions again = job.WorkerOptions(0);
  again.async = true;
  std::unique_ptr<KVWorker> restarted;
  ASSERT_TRUE(KVWorker::Start(again, &restarted).ok());
  ASSERT_TRUE(restarted->Recover(&step).ok());
  EXPECT_EQ(step, 5u);
}

// A worker taken for lost while its process lives on (its pod
// force-deleted from an unreachable node): a new process of the same worker
// registered, and the old one ends in its own words, as replaced, not as a
// stop of the job, which goes on with the new one.
TEST(KVWorkerReplacedTest, AReplacedWorkerEndsAsReplacedNotAsTheJobsStop) {
  JobOptions options;
  options.replace_silent_after_ms = 0;
  Job job(options);
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job);
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  std::unique_ptr<KVWorker> successor;
  ASSERT_TRUE(KVWorker::Start(job.WorkerOptions(0), &successor).ok());
  const Status ended = workers[0]->Barrier("end");
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.reason(), kReasonReplaced);
  EXPECT_THAT(ended.message(), HasSubstr("a newer process of this worker registered"));
  EXPECT_THAT(ended.message(), Not(HasSubstr("stopped the job")));
}

// Connections the kernel has established to 127.0.0.1:`port`, counted at
// the listening end (local port, state 01), whether its socket is IPv4 or,
// as gRPC makes them, IPv6 holding a v4-mapped address.
int ConnectionsTo(int port) {
  char v4[16], v6[48];
  std::snprintf(v4, sizeof v4, "0100007F:%04X", port);
  std::snprintf(v6, sizeof v6, "0000000000000000FFFF00000100007F:%04X", port);
  int count = 0;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream table(path);
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if ((local == v4 || local == v6) && state == "01") ++count;
    }
  }
  return count;
}

// Each KV client has a connection of its own to each server, as each
// worker's process has: gRPC gives a process's channels to one address one
// connection, so that kv_goodput's workers, in one process, took turns on
// one socket per server.
TEST(KVWorkerConnectionTest, TwoClientsInOneProcessHaveAConnectionEach) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::unique_ptr<KVWorker>> workers = StartWorkers(job);
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorkers)) << "a worker did not start";
  std::vector<WorkerTensors> tensors;
  for (int w = 0; w < kWorkers; ++w) tensors.emplace_back(w);
  ASSERT_EQ(InitAll(workers, tensors), "");
  std::vector<std::future<Status>> pushes;
  for (int w = 0; w < kWorkers; ++w) {
    tensors[w].SetGrads(w, 0);
    pushes.push_back(std::async(std::launch::async, [&, w] {
      return workers[w]->Wait(workers[w]->Push(tensors[w].grad_ptrs, 0));
    }));
  }
  for (auto& push : pushes) ASSERT_TRUE(push.get().ok());
  const std::string address = job.ShardAddress(0);
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  EXPECT_EQ(ConnectionsTo(port), kWorkers);
}

// A port on which nothing listens: bound once, then closed.
int DeadPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(ResendCallerTest, DeadPeerFailsAfterMaxResendsPlusOneTriesInBoundedTime) {
  const std::string address = "127.0.0.1:" + std::to_string(DeadPort());
  auto stub = v1::ParameterServer::NewStub(OpenChannel(address));
  ResendPolicy policy;
  policy.timeout_ms = 50;
  policy.max_resends = 3;
  policy.backoff_base_ms = 10;
  policy.backoff_cap_ms = 40;
  ResendCaller caller(policy, nullptr, &NullMetrics());

  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-0");
  v1::PushResponse response;
  int attempts = 0;
  const std::string peer = "server 1 (" + address + ")";
  auto start = std::chrono::steady_clock::now();
  Status s = caller.Call(peer, "Push", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Push(&c, request, &response);
  });
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 4);
  EXPECT_THAT(s.message(), HasSubstr("Push"));
  EXPECT_THAT(s.message(), HasSubstr(peer));
  EXPECT_THAT(s.message(), HasSubstr("4 tries"));
  // 4 attempts of 50 ms plus 3 backoffs of at most 10 + 20 + 40 ms.
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
}

TEST(ResendCallerTest, NonRetryableErrorIsNotResent) {
  ShardOptions options;
  options.num_workers = 1;
  std::string error;
  Shard shard(options, MakeOptimizer(options.optimizer, &error), &NullMetrics());
  ParameterServerService service(&shard, JobToken::Fixed(kToken), nullptr);
  int port = 0;
  auto server = Serve(&service, &port);
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto stub = v1::ParameterServer::NewStub(OpenChannel(address));
  ResendPolicy policy;
  policy.timeout_ms = 2000;
  policy.max_resends = 5;

  // A push of a part the shard does not store: INVALID_ARGUMENT, once.
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-0");
  request.set_worker_rank(0);
  auto* part = request.add_parts();
  part->set_key(9);
  part->set_length(1);
  request.set_data(std::string(4, '\0'));
  v1::PushResponse response;
  int attempts = 0;
  ResendCaller caller(policy, JobToken::Fixed(kToken), &NullMetrics());
  Status s = caller.Call("server 0", "Push", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Push(&c, request, &response);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(s.message(), HasSubstr("key 9"));
  EXPECT_THAT(s.message(), HasSubstr("Push to server 0"));
  // The message must report the attempts actually made, not the most allowed.
  EXPECT_THAT(s.message(), HasSubstr("failed after 1 tr"))
      << "BUG: a non-retryable failure after one attempt is reported as max_resends + 1 tries";

  // Without the job's token: UNAUTHENTICATED, not resent either.
  attempts = 0;
  ResendCaller no_token(policy, nullptr, &NullMetrics());
  v1::PullRequest pull;
  v1::PullResponse pull_response;
  s = no_token.Call("server 0", "Pull", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Pull(&c, pull, &pull_response);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(s.message(), HasSubstr("token"));
  server->Shutdown(std::chrono::system_clock::now() + 1s);
}

}  // namespace
}  // namespace kubeps
