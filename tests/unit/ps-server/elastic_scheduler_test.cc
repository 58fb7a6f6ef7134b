// The scheduler of an elastic job (ps-server/elastic_workers.h): the
// membership lease the workers' heartbeats carry, scaling down and up at a
// step no worker has reached, workers that leave, and a lost worker
// dropped through a recovery (or the job failed below minReplicas).
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/membership.h"
#include "common/metrics.h"
#include "ps-server/scheduler.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Scheduler> ElasticScheduler(int workers, int min, int max,
                                            int replace_timeout_ms = 60000,
                                            MetricsServer* metrics = &NullMetrics(),
                                            bool sync = true) {
  SchedulerOptions options;
  options.sync = sync;
  options.num_servers = 1;
  options.num_workers = workers;
  options.replace_silent_after_ms = 0;
  options.elastic.elastic = true;
  options.elastic.initial_workers = workers;
  options.elastic.min_workers = min;
  options.elastic.max_workers = max;
  options.elastic.global_batch = 64;
  options.elastic.replace_timeout_ms = replace_timeout_ms;
  return std::make_unique<Scheduler>(options, metrics);
}

double WorkersGauge(MetricsServer& metrics) {
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name == "kubeps_job_workers") return family.metric[0].gauge.value;
  }
  return -1;
}

struct Registered {
  int rank = -1;
  std::string key;
};

Registered Register(Scheduler& s, const std::string& node_id, v1::Role role) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id(node_id);
  request.mutable_node()->set_role(role);
  request.mutable_node()->set_incarnation(1);
  if (role == v1::SERVER) request.mutable_node()->set_address("server.local:9000");
  v1::RegisterResponse response;
  EXPECT_TRUE(s.Register(&request, &response).ok()) << node_id;
  return {response.rank(), response.registration_key()};
}

// The job's server-0 and workers 0 to workers - 1, registered in order.
std::vector<Registered> RegisterJob(Scheduler& s, int workers) {
  Register(s, "server-0", v1::SERVER);
  std::vector<Registered> registered;
  for (int rank = 0; rank < workers; ++rank)
    registered.push_back(Register(s, "worker-" + std::to_string(rank), v1::WORKER));
  return registered;
}

// A node registering with a scheduler that restarted, with the schedule it
// heard (workers) or none (servers).
void RegisterAgain(Scheduler& s, const std::string& id, const v1::Membership* heard) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id(id);
  request.mutable_node()->set_role(heard ? v1::WORKER : v1::SERVER);
  request.mutable_node()->set_incarnation(1);
  request.mutable_node()->set_registered_before(true);
  request.mutable_node()->set_rank(id.back() - '0');  // the rank it had, its id's suffix here
  if (heard) {
    *request.mutable_node()->mutable_membership() = *heard;
  } else {
    request.mutable_node()->set_address("server.local:9000");
  }
  v1::RegisterResponse response;
  EXPECT_TRUE(s.Register(&request, &response).ok()) << id;
}

v1::HeartbeatResponse Beat(Scheduler& s, const std::string& node_id, uint64_t step = 0,
                           std::vector<uint64_t> checkpoint_steps = {}) {
  v1::HeartbeatRequest request;
  request.set_node_id(node_id);
  request.set_incarnation(1);
  request.set_step(step);
  for (uint64_t held : checkpoint_steps) request.add_checkpoint_steps(held);
  v1::HeartbeatResponse response;
  EXPECT_TRUE(s.Heartbeat(&request, &response).ok());
  return response;
}

grpc::Status Finish(Scheduler& s, const std::string& node_id, const Registered& r) {
  v1::FinishRequest request;
  request.set_node_id(node_id);
  request.set_rank(r.rank);
  request.set_registration_key(r.key);
  v1::FinishResponse response;
  return s.Finish(&request, &response);
}

TEST(ElasticSchedulerTest, WorkersLearnWhoComputesEachStepALeaseAheadOfTheFurthest) {
  auto s = ElasticScheduler(2, 1, 4);
  RegisterJob(*s, 2);
  const v1::Membership first = Beat(*s, "worker-0", 0).membership();
  EXPECT_EQ(DescribeMembership(first), "from step 0: ranks 0,1");
  EXPECT_EQ(first.global_batch(), 64u);
  EXPECT_GE(first.fixed_below(), ElasticWorkers::kMinLeaseSteps);
  // A worker at the end of the lease asks again and is let on at once.
  const v1::Membership later = Beat(*s, "worker-1", first.fixed_below()).membership();
  EXPECT_GT(later.fixed_below(), first.fixed_below());
  EXPECT_TRUE(Beat(*s, "server-0").membership().changes().empty())
      << "servers learn the step's workers from the pushes";
}

// server-0 registering with checkpoints of step 100 written with a global
// batch of `global_batch` (0: not said).
v1::NodeInfo ServerHoldingStep100(uint32_t global_batch) {
  v1::NodeInfo server;
  server.set_node_id("server-0");
  server.set_role(v1::SERVER);
  server.set_incarnation(1);
  server.set_address("server.local:9000");
  server.set_checkpoint_step(100);
  server.add_checkpoint_steps(100);
  server.set_checkpoint_global_batch(global_batch);
  return server;
}

void RegisterServer(Scheduler& s, const v1::NodeInfo& server) {
  v1::RegisterRequest request;
  *request.mutable_node() = server;
  v1::RegisterResponse response;
  ASSERT_TRUE(s.Register(&request, &response).ok());
}

// Started again over its checkpoints with other workers (Kueue admitting an
// evicted job again with fewer, a rerun), an elastic job keeps the global
// batch they were written with: with batchSize x its workers now, the
// checkpoint's step would stand for another number of examples of its epoch.
// Checkpoints of a fixed job say none. So does a scheduler restarted before
// any worker heard a schedule: the servers say the batch they hold.
TEST(ElasticSchedulerTest, AJobStartedAgainOverItsCheckpointsKeepsTheirGlobalBatch) {
  for (bool restarted : {false, true}) {
    for (uint32_t written_with : {128u, 0u}) {
      SCOPED_TRACE(std::string(restarted ? "a restarted scheduler; " : "") +
                   "checkpoints of global batch " + std::to_string(written_with));
      auto s = ElasticScheduler(1, 1, 4);  // batchSize x 1 worker: 64
      v1::NodeInfo server = ServerHoldingStep100(written_with);
      server.set_registered_before(restarted);
      RegisterServer(*s, server);
      Register(*s, "worker-0", v1::WORKER);
      const v1::HeartbeatResponse beat = Beat(*s, "worker-0");
      if (!restarted) {
        EXPECT_EQ(beat.restore_step(), 100u);
      }
      EXPECT_EQ(beat.membership().global_batch(), written_with ? written_with : 64u);
      EXPECT_EQ(DescribeMembership(beat.membership()), "from step 0: ranks 0");
    }
  }
}

TEST(ElasticSchedulerTest, AJobStartedAgainWithAnotherBatchSizeOrMoreWorkersTakesItsOwnBatch) {
  struct Case {
    const char* what;
    int batch_size, workers, max_workers;  // this job's
    uint32_t written_batch, written_batch_size;
    uint32_t expected;
  };
  for (const Case& c : {
           // The user halved spec.batchSize (a GPU ran out of memory): the
           // job must not keep the batch it ran out of memory with.
           Case{"spec.batchSize changed", 32, 2, 4, 128, 64, 64},
           Case{"spec.batchSize kept, the workers changed", 64, 1, 4, 128, 64, 128},
           // A step of 2 examples cannot be cut over up to 3 workers.
           Case{"a batch smaller than maxReplicas", 2, 2, 3, 2, 2, 4},
       }) {
    SCOPED_TRACE(c.what);
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = c.workers;
    options.replace_silent_after_ms = 0;
    options.batch_size = c.batch_size;
    options.elastic.elastic = true;
    options.elastic.initial_workers = c.workers;
    options.elastic.min_workers = 1;
    options.elastic.max_workers = c.max_workers;
    options.elastic.global_batch = static_cast<uint64_t>(c.batch_size) * c.workers;
    Scheduler s(options, &NullMetrics());
    v1::NodeInfo server = ServerHoldingStep100(c.written_batch);
    server.set_checkpoint_batch_size(c.written_batch_size);
    RegisterServer(s, server);
    for (int rank = 0; rank < c.workers; ++rank)
      Register(s, "worker-" + std::to_string(rank), v1::WORKER);
    EXPECT_EQ(Beat(s, "worker-0").membership().global_batch(), c.expected);
  }
}

TEST(ElasticSchedulerTest, ScalingDownTakesTheHighestRankOutAtTheLeasesEndAndTheJobGoesOn) {
  std::unique_ptr<MetricsServer> metrics;
  ASSERT_TRUE(MetricsServer::Start("", -1, {}, &metrics).ok());
  auto s = ElasticScheduler(2, 1, 4, 60000, metrics.get());
  EXPECT_EQ(WorkersGauge(*metrics), 2);
  const std::vector<Registered> w = RegisterJob(*s, 2);
  const uint64_t lease = Beat(*s, "worker-0", 30).membership().fixed_below();
  EXPECT_EQ(s->SetDesiredWorkers(1), "");
  const v1::Membership after = Beat(*s, "worker-0", 31).membership();
  ASSERT_EQ(after.changes_size(), 2);
  EXPECT_EQ(after.changes(1).from_step(), lease) << "no worker may have computed it yet";
  EXPECT_THAT(MembersAt(after, lease - 1), ElementsAre(0, 1));
  EXPECT_THAT(MembersAt(after, lease), ElementsAre(0));
  EXPECT_EQ(WorkersGauge(*metrics), 1) << "kubeps_job_workers";
  // Worker 1 pushes its last step and leaves: the job is not over.
  ASSERT_TRUE(Finish(*s, "worker-1", w[1]).ok());
  EXPECT_FALSE(s->AllWorkersFinished());
  EXPECT_FALSE(Beat(*s, "worker-0", 40).shutdown());
  EXPECT_TRUE(Beat(*s, "server-0").dead_nodes().empty()) << "a worker that left is not dead";
  ASSERT_TRUE(Finish(*s, "worker-0", w[0]).ok());
  EXPECT_TRUE(s->AllWorkersFinished());
}

TEST(ElasticSchedulerTest, AWorkerThatRegistersJoinsWhenTheJobIsScaledUp) {
  auto s = ElasticScheduler(1, 1, 3);
  RegisterJob(*s, 1);
  Beat(*s, "worker-0", 50);
  const Registered w2 = Register(*s, "worker-2", v1::WORKER);
  EXPECT_EQ(w2.rank, 2) << "ranks follow the replicas' names";
  EXPECT_THAT(MembersAt(Beat(*s, "worker-2").membership(), 1000), ElementsAre(0))
      << "not taken in before the job is scaled up";
  EXPECT_EQ(s->SetDesiredWorkers(3), "");
  const v1::Membership up = Beat(*s, "worker-2").membership();
  const StepMembership joining = MembershipOf(up, 2, 50);
  ASSERT_TRUE(joining.next_member_step.has_value());
  EXPECT_GT(*joining.next_member_step, 50u);
  EXPECT_THAT(MembersAt(up, *joining.next_member_step), ElementsAre(0, 2))
      << "only registered workers join: worker-1 has not come";
  // 64 examples over two: 32 each.
  EXPECT_EQ(MembershipOf(up, 2, *joining.next_member_step).first_example, 32u);
}

TEST(ElasticSchedulerTest, AChangeAskedForAtAStepIsMadeThereAndTheJobWaitsThereForItsWorkers) {
  auto s = ElasticScheduler(2, 1, 3);
  RegisterJob(*s, 2);
  Beat(*s, "worker-0", 10);
  EXPECT_EQ(s->SetDesiredWorkers(3, 100), "");
  // Worker 2 is not up yet: the lease stops at step 100, whatever the pace.
  v1::Membership held = Beat(*s, "worker-0", 99).membership();
  EXPECT_EQ(held.fixed_below(), 100u);
  EXPECT_EQ(Beat(*s, "worker-0", 100).membership().fixed_below(), 100u);
  Register(*s, "worker-2", v1::WORKER);
  const v1::Membership up = Beat(*s, "worker-0", 100).membership();
  EXPECT_THAT(MembersAt(up, 99), ElementsAre(0, 1));
  EXPECT_THAT(MembersAt(up, 100), ElementsAre(0, 1, 2));
  EXPECT_GT(up.fixed_below(), 100u) << "the job goes on";
  EXPECT_THAT(s->SetDesiredWorkers(2, 50), HasSubstr("step 50 is too near"));
}

TEST(ElasticSchedulerTest, ARestartedSchedulerLearnsTheScheduleBackFromTheWorkers) {
  auto s = ElasticScheduler(2, 1, 4);  // started again: it knows nothing of the job
  v1::Membership heard;
  heard.set_epoch(5);
  heard.set_global_batch(64);
  heard.set_fixed_below(150);
  auto* first = heard.add_changes();
  first->add_ranks(0);
  first->add_ranks(1);
  auto* later = heard.add_changes();
  later->set_from_step(100);
  later->add_ranks(0);
  RegisterAgain(*s, "server-0", nullptr);
  RegisterAgain(*s, "worker-0", &heard);
  const v1::Membership back = Beat(*s, "worker-0", 140).membership();
  EXPECT_EQ(DescribeMembership(back), DescribeMembership(heard));
  EXPECT_GE(back.fixed_below(), 150u) << "nothing fixed is rewritten";
  EXPECT_THAT(MembersAt(back, 149), ElementsAre(0)) << "worker 1 left before the restart";
}

TEST(ElasticSchedulerTest, ASchedulerRestartedAfterAScaleUpKeepsTheWorkersItLearnsBack) {
  auto s = ElasticScheduler(2, 1, 4);  // started again with the job's first number, 2
  v1::Membership heard;
  heard.set_epoch(3);
  heard.set_global_batch(64);
  heard.set_fixed_below(80);
  heard.add_changes()->add_ranks(0);
  heard.mutable_changes(0)->add_ranks(1);
  auto* up = heard.add_changes();
  up->set_from_step(50);
  for (int rank : {0, 1, 2}) up->add_ranks(rank);
  RegisterAgain(*s, "server-0", nullptr);
  for (const char* id : {"worker-0", "worker-1", "worker-2"}) RegisterAgain(*s, id, &heard);
  const v1::Membership now = Beat(*s, "worker-0", 79).membership();
  EXPECT_EQ(now.changes_size(), 2) << DescribeMembership(now);
  EXPECT_THAT(MembersAt(now, now.fixed_below() - 1), ElementsAre(0, 1, 2))
      << "not scaled back to the number the job started with";
}

TEST(ElasticSchedulerTest, ANumberOutsideTheBoundsOrForAFixedJobIsRefused) {
  auto s = ElasticScheduler(2, 2, 4);
  EXPECT_EQ(s->SetDesiredWorkers(5),
            "the job's workers can be scaled to 2 to 4 (elasticPolicy), not 5");
  EXPECT_THAT(s->SetDesiredWorkers(1), HasSubstr("not 1"));
  SchedulerOptions fixed;
  Scheduler plain(fixed, &NullMetrics());
  EXPECT_EQ(plain.SetDesiredWorkers(2), "the job's workers are fixed: it has no elasticPolicy");
}

TEST(ElasticSchedulerTest, ALostWorkerIsDroppedThroughARecoveryWhileMinReplicasRemain) {
  auto s = ElasticScheduler(2, 1, 2, /*replace_timeout_ms=*/200);
  RegisterJob(*s, 2);
  Beat(*s, "worker-0", 25);
  Beat(*s, "server-0", 0, {10, 20});
  std::this_thread::sleep_for(300ms);  // worker-1 falls silent
  const v1::HeartbeatResponse beat = Beat(*s, "worker-0", 26);
  EXPECT_EQ(beat.generation(), 1u) << "the job rolls back to redo the steps without it";
  EXPECT_EQ(beat.restore_step(), 20u) << "the newest checkpoint every shard holds";
  EXPECT_THAT(MembersAt(beat.membership(), 19), ElementsAre(0, 1));
  EXPECT_THAT(MembersAt(beat.membership(), 20), ElementsAre(0));
  EXPECT_EQ(beat.failure(), "");
}

TEST(ElasticSchedulerTest, ALostWorkerBeforeAnyCheckpointFailsTheJobSayingWhy) {
  auto s = ElasticScheduler(2, 1, 2, /*replace_timeout_ms=*/200);
  RegisterJob(*s, 2);
  std::this_thread::sleep_for(300ms);
  EXPECT_THAT(Beat(*s, "worker-0", 6).failure(),
              HasSubstr("its shards hold no checkpoint in common to redo the steps from"));
}

TEST(ElasticSchedulerTest, WorkersSilentUntilTheJobStartsAreItsMembers) {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.dead_after_ms = 100;
  options.elastic = {true, 2, 1, 3, 64, 60000};
  Scheduler s(options, &NullMetrics());
  Register(s, "worker-0", v1::WORKER);
  Register(s, "worker-1", v1::WORKER);
  std::this_thread::sleep_for(200ms);  // they wait for the view, which waits for the server
  Register(s, "server-0", v1::SERVER);
  EXPECT_THAT(MembersAt(Beat(s, "worker-0").membership(), 0), ElementsAre(0, 1));
  EXPECT_FALSE(s.AllWorkersFinished());
}

TEST(ElasticSchedulerTest, AWorkerOnItsWayOutIsNotTakenBackBeforeItLeft) {
  auto s = ElasticScheduler(3, 1, 3);
  const std::vector<Registered> w = RegisterJob(*s, 3);
  Beat(*s, "worker-0", 10);
  ASSERT_EQ(s->SetDesiredWorkers(2), "");
  Beat(*s, "worker-2", 10);
  ASSERT_EQ(s->SetDesiredWorkers(3), "");  // flapping back at once
  auto newest = [](const v1::Membership& m) {
    const auto& last = m.changes(m.changes_size() - 1);
    return std::vector<int>(last.ranks().begin(), last.ranks().end());
  };
  EXPECT_THAT(newest(Beat(*s, "worker-2", 10).membership()), ElementsAre(0, 1))
      << "it may leave all the same: not counted on";
  ASSERT_TRUE(Finish(*s, "worker-2", w[2]).ok());  // it left
  EXPECT_FALSE(s->AllWorkersFinished());
  // Its pod comes back as a new process, which is taken in.
  v1::RegisterRequest again;
  again.mutable_node()->set_node_id("worker-2");
  again.mutable_node()->set_role(v1::WORKER);
  again.mutable_node()->set_incarnation(2);
  v1::RegisterResponse response;
  ASSERT_TRUE(s->Register(&again, &response).ok());
  v1::HeartbeatRequest beat;
  beat.set_node_id("worker-2");
  beat.set_incarnation(2);
  v1::HeartbeatResponse answer;
  ASSERT_TRUE(s->Heartbeat(&beat, &answer).ok());
  EXPECT_THAT(newest(answer.membership()), ElementsAre(0, 1, 2));
}

TEST(ElasticSchedulerTest, ChangesStayInStepOrderAfterOneAskedForAtALaterStep) {
  auto s = ElasticScheduler(2, 1, 3);
  RegisterJob(*s, 3);
  Beat(*s, "worker-0", 10);
  ASSERT_EQ(s->SetDesiredWorkers(3, 1000), "");
  ASSERT_EQ(s->SetDesiredWorkers(1), "");
  const v1::Membership now = Beat(*s, "worker-0", 11).membership();
  ASSERT_EQ(now.changes_size(), 3);
  EXPECT_EQ(now.changes(1).from_step(), 1000u);
  EXPECT_GT(now.changes(2).from_step(), 1000u) << DescribeMembership(now);
  EXPECT_THAT(MembersAt(now, now.changes(2).from_step()), ElementsAre(0));
}

TEST(ElasticSchedulerTest, AWorkerThatLeftBeforeHearingOfARollbackIsPlannedOutOfTheRedo) {
  auto s = ElasticScheduler(3, 1, 3, 60000);
  const std::vector<Registered> w = RegisterJob(*s, 3);
  Beat(*s, "server-0", 0, {50});
  Beat(*s, "worker-0", 60);
  ASSERT_EQ(s->SetDesiredWorkers(2), "");
  const uint64_t change = Beat(*s, "worker-0", 61).membership().changes(1).from_step();
  // server-0 restarts from its checkpoint of step 50: generation 1.
  v1::RegisterRequest restarted;
  restarted.mutable_node()->set_node_id("server-0");
  restarted.mutable_node()->set_role(v1::SERVER);
  restarted.mutable_node()->set_incarnation(2);
  restarted.mutable_node()->set_address("server.local:9000");
  restarted.mutable_node()->add_checkpoint_steps(50);
  restarted.mutable_node()->set_checkpoint_step(50);
  v1::RegisterResponse response;
  ASSERT_TRUE(s->Register(&restarted, &response).ok());
  ASSERT_EQ(Beat(*s, "worker-0", change).generation(), 1u);
  // worker-2 had pushed its last step and leaves, in generation 0.
  ASSERT_TRUE(Finish(*s, "worker-2", w[2]).ok());
  const v1::HeartbeatResponse beat = Beat(*s, "worker-0", 50);
  EXPECT_EQ(beat.generation(), 2u) << "the redo is planned again without it";
  EXPECT_EQ(beat.restore_step(), 50u);
  EXPECT_THAT(MembersAt(beat.membership(), 50), ElementsAre(0, 1));
}

TEST(ElasticSchedulerTest, AnAsyncJobDropsALostWorkerWithoutRollingBack) {
  auto s = ElasticScheduler(2, 1, 2, /*replace_timeout_ms=*/200, &NullMetrics(), /*sync=*/false);
  RegisterJob(*s, 2);
  const uint64_t lease = Beat(*s, "worker-0", 5).membership().fixed_below();
  std::this_thread::sleep_for(300ms);
  const v1::HeartbeatResponse beat = Beat(*s, "worker-0", 6);
  EXPECT_EQ(beat.generation(), 0u) << "no step waits for its gradients: nothing to recompute";
  EXPECT_THAT(MembersAt(beat.membership(), lease - 1), ElementsAre(0, 1));
  EXPECT_THAT(MembersAt(beat.membership(), lease), ElementsAre(0));
}

// The scheduler forgets a dropped worker; the shard does not: taken back,
// the worker goes on from its own step, not from 0.
TEST(ElasticSchedulerTest, AnAsyncWorkerDroppedAndTakenBackGoesOnFromItsOwnStep) {
  auto s = ElasticScheduler(2, 1, 2, /*replace_timeout_ms=*/200, &NullMetrics(), /*sync=*/false);
  RegisterJob(*s, 2);
  Beat(*s, "worker-1", 40);
  v1::HeartbeatRequest shard_beat;
  shard_beat.set_node_id("server-0");
  shard_beat.set_incarnation(1);
  (*shard_beat.mutable_async_worker_steps()->mutable_next_step())[1] = 42;
  v1::HeartbeatResponse answer;
  ASSERT_TRUE(s->Heartbeat(&shard_beat, &answer).ok());
  std::this_thread::sleep_for(300ms);
  Beat(*s, "worker-0", 6);  // worker-1 is dropped
  ASSERT_THAT(MembersAt(Beat(*s, "worker-0", 7).membership(), 1000), ElementsAre(0));
  Register(*s, "worker-1", v1::WORKER);
  EXPECT_EQ(Beat(*s, "worker-1", 0).own_step(), 42u);
}

TEST(ElasticSchedulerTest, ALostWorkerAtMinReplicasFailsTheJobSayingWhy) {
  auto s = ElasticScheduler(2, 2, 3, /*replace_timeout_ms=*/200);
  RegisterJob(*s, 2);
  Beat(*s, "worker-0", 5);
  std::this_thread::sleep_for(300ms);
  EXPECT_THAT(Beat(*s, "worker-0", 6).failure(),
              HasSubstr("worker-1 (rank 1) has been gone for 200 ms "
                        "(elasticPolicy.replaceTimeoutSeconds) and the job cannot go on without "
                        "it: 1 workers would remain, below elasticPolicy.minReplicas (2)"));
}

// A worker lost after the others finished (rank 0 evicted while it
// evaluates) pushed every step: the others finished only once the last
// step's update was made. Before, it was dropped through a rollback to the
// newest checkpoint, which the finished workers made the job's end at once:
// the servers restored it and wrote it as the final model.
TEST(ElasticSchedulerTest, AWorkerLostAfterTheOthersFinishedIsDroppedWithoutARollback) {
  for (int min : {1, 3}) {
    SCOPED_TRACE("minReplicas " + std::to_string(min));
    auto s = ElasticScheduler(3, min, 3, /*replace_timeout_ms=*/200);
    const std::vector<Registered> w = RegisterJob(*s, 3);
    Beat(*s, "server-0", 0, {100, 200});
    ASSERT_TRUE(Finish(*s, "worker-1", w[1]).ok());
    ASSERT_TRUE(Finish(*s, "worker-2", w[2]).ok());
    std::this_thread::sleep_for(300ms);  // worker-0 falls silent
    const v1::HeartbeatResponse beat = Beat(*s, "server-0", 0, {100, 200});
    EXPECT_EQ(beat.generation(), 0u) << "nothing to redo";
    EXPECT_EQ(beat.failure(), "");
    EXPECT_TRUE(beat.shutdown()) << "the job's steps are all done";
  }
}

// An async job's finished worker says nothing of another's steps: one lost
// is dropped only while minReplicas remain, as before.
TEST(ElasticSchedulerTest, AnAsyncWorkerLostAfterAnotherFinishedStillCountsForMinReplicas) {
  auto s = ElasticScheduler(2, 2, 2, /*replace_timeout_ms=*/200, &NullMetrics(), /*sync=*/false);
  const std::vector<Registered> w = RegisterJob(*s, 2);
  ASSERT_TRUE(Finish(*s, "worker-1", w[1]).ok());
  std::this_thread::sleep_for(300ms);  // worker-0 falls silent, its steps not done
  EXPECT_THAT(Beat(*s, "server-0").failure(), HasSubstr("below elasticPolicy.minReplicas (2)"));
}

// A barrier of an elastic job waits for the workers of the step they are
// at: not for those it started with, nor for one taken in at a later step
// (which waits for that step, and would wait for ever).
TEST(ElasticSchedulerTest, ABarrierWaitsForTheWorkersOfTheStepTheJobIsAt) {
  auto s = ElasticScheduler(2, 1, 3);
  RegisterJob(*s, 2);
  Beat(*s, "worker-0", 5);
  auto barrier = [&s](const std::string& name, int rank, uint32_t wait_ms) {
    v1::BarrierRequest request;
    request.set_name(name);
    request.set_rank(rank);
    request.set_wait_ms(wait_ms);
    v1::BarrierResponse response;
    EXPECT_TRUE(s->Barrier(&request, &response).ok());
    return response.released();
  };
  // Scaled up: worker 2 joins at the lease's end, after the barrier.
  Register(*s, "worker-2", v1::WORKER);
  Beat(*s, "worker-2", 0);
  ASSERT_EQ(s->SetDesiredWorkers(3), "");
  ASSERT_THAT(Beat(*s, "worker-0", 6).membership().changes_size(), 2);
  auto first = std::async(std::launch::async, barrier, "before-the-join", 0, 10000);
  EXPECT_TRUE(barrier("before-the-join", 1, 5000)) << "worker 2 computes no step yet";
  ASSERT_EQ(first.wait_for(5s), std::future_status::ready);
  // Scaled down to one: once the job is at the step from which worker 0 is
  // alone, the barrier no longer waits for the others.
  ASSERT_EQ(s->SetDesiredWorkers(1), "");
  const v1::Membership after = Beat(*s, "worker-0", 7).membership();
  const uint64_t alone_from = after.changes(after.changes_size() - 1).from_step();
  auto waiting = std::async(std::launch::async, barrier, "evaluated", 0, 10000);
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout) << "worker 1 still computes";
  Beat(*s, "worker-0", alone_from);
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "worker 0 is the job now";
  EXPECT_TRUE(waiting.get());
}

}  // namespace
}  // namespace kubeps
