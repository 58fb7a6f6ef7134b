// Which checkpoint step a job resumes or recovers from (ps-server/scheduler.h):
// the newest step every shard holds, at the scheduler's first start (a job
// run again over its checkpoints) and at a recovery; none in common fails
// the job with a message naming the checkpoint folders. Where the workers'
// programs keep the parameters, a step the restarted program holds its own
// state of. The store's side: checkpoint_store_test.cc.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/termination_message.h"
#include "ps-server/scheduler.h"

namespace kubeps {
namespace {

using ::testing::HasSubstr;

TEST(NewestCommonStepTest, PicksTheNewestStepEveryShardHolds) {
  EXPECT_EQ(NewestCommonStep({{100, 200, 300}, {100, 200, 300}}), 300);
  // One shard lags (a failed write): the job goes back to what both hold.
  EXPECT_EQ(NewestCommonStep({{100, 200, 300}, {100, 200}}), 200);
  EXPECT_EQ(NewestCommonStep({{0, 300, 400, 500}, {0, 100, 200}}), 0);
  EXPECT_EQ(NewestCommonStep({{300, 100, 200}, {200, 100}}), 200);  // any order
  EXPECT_EQ(NewestCommonStep({{5}}), 5);
}

TEST(NewestCommonStepTest, NoneInCommonIsMinusOne) {
  EXPECT_EQ(NewestCommonStep({{300, 400}, {100, 200}}), -1);
  EXPECT_EQ(NewestCommonStep({{100}, {}}), -1);
  EXPECT_EQ(NewestCommonStep({}), -1);
}

std::unique_ptr<Scheduler> MakeScheduler(const std::string& dir = "/ckpt", bool sync = true,
                                         bool workers_keep_parameters = false) {
  SchedulerOptions options;
  options.sync = sync;
  options.workers_keep_parameters = workers_keep_parameters;
  options.num_servers = 2;
  options.num_workers = 1;
  options.checkpoint_dir = dir;
  options.replace_silent_after_ms = 0;  // shards restart at once here
  return std::make_unique<Scheduler>(options, &NullMetrics());
}

// An async shard's word on each worker's step: worker-0's, rank 0.
v1::AsyncWorkerSteps WorkerZeroAt(uint64_t next_step) {
  v1::AsyncWorkerSteps said;
  (*said.mutable_next_step())[0] = next_step;
  return said;
}

v1::RegisterResponse RegisterServer(
    Scheduler& s, const std::string& id, const std::vector<uint64_t>& steps,
    uint64_t incarnation = 1, std::optional<v1::AsyncWorkerSteps> worker_steps = std::nullopt) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id(id);
  request.mutable_node()->set_role(v1::SERVER);
  request.mutable_node()->set_address(id + ":1");
  request.mutable_node()->set_incarnation(incarnation);
  request.mutable_node()->set_checkpoint_step(steps.empty() ? -1 : int64_t(steps.back()));
  for (uint64_t step : steps) request.mutable_node()->add_checkpoint_steps(step);
  if (worker_steps) *request.mutable_node()->mutable_async_worker_steps() = *worker_steps;
  v1::RegisterResponse response;
  grpc::Status status = s.Register(&request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

void RegisterWorker(Scheduler& s, uint64_t incarnation = 1) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("worker-0");
  request.mutable_node()->set_role(v1::WORKER);
  request.mutable_node()->set_incarnation(incarnation);
  v1::RegisterResponse response;
  ASSERT_TRUE(s.Register(&request, &response).ok());
}

// A new job's scheduler, both shards (no checkpoint yet) and the worker
// registered.
std::unique_ptr<Scheduler> NewJob(bool workers_keep_parameters = false) {
  auto s = MakeScheduler("/ckpt", /*sync=*/true, workers_keep_parameters);
  RegisterServer(*s, "server-0", {});
  RegisterServer(*s, "server-1", {});
  RegisterWorker(*s);
  return s;
}

// A node registering with a restarted scheduler: it ran before, in
// `generation`; a server that `awaits_recovery` loaded its checkpoint at
// process start and has been brought into no generation since.
void RegisterAgain(Scheduler& s, v1::Role role, const std::string& id,
                   const std::vector<uint64_t>& steps, uint64_t generation = 0,
                   bool awaits_recovery = false) {
  v1::RegisterRequest request;
  v1::NodeInfo* node = request.mutable_node();
  node->set_node_id(id);
  node->set_role(role);
  node->set_address(id + ":1");
  node->set_incarnation(1);
  node->set_registered_before(true);
  node->set_rank(id.back() - '0');  // the rank it had, its id's suffix here
  node->set_generation(generation);
  node->set_awaits_recovery(awaits_recovery);
  for (uint64_t step : steps) node->add_checkpoint_steps(step);
  v1::RegisterResponse response;
  grpc::Status status = s.Register(&request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

v1::HeartbeatResponse Beat(Scheduler& s, const std::string& id, uint64_t restored,
                           const std::vector<uint64_t>& steps, uint64_t incarnation = 1,
                           std::optional<v1::AsyncWorkerSteps> worker_steps = std::nullopt) {
  v1::HeartbeatRequest request;
  request.set_node_id(id);
  request.set_incarnation(incarnation);
  request.set_restored_generation(restored);
  for (uint64_t step : steps) request.add_checkpoint_steps(step);
  if (worker_steps) *request.mutable_async_worker_steps() = *worker_steps;
  v1::HeartbeatResponse response;
  EXPECT_TRUE(s.Heartbeat(&request, &response).ok());
  return response;
}

TEST(FirstStartTest, NewJobStaysInGenerationZero) {
  auto s = NewJob();
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_EQ(beat.generation(), 0u);
  EXPECT_TRUE(beat.generation_ready());
  EXPECT_EQ(beat.failure(), "");
}

TEST(FirstStartTest, JobRunAgainResumesFromTheNewestCommonStep) {
  auto s = MakeScheduler();
  RegisterServer(*s, "server-0", {100, 200, 300});
  RegisterServer(*s, "server-1", {100, 200});
  RegisterWorker(*s);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_EQ(beat.restore_step(), 200u);
  EXPECT_FALSE(beat.generation_ready());  // until both shards restored it
  Beat(*s, "server-0", 1, {100, 200, 300});
  Beat(*s, "server-1", 1, {100, 200});
  beat = Beat(*s, "worker-0", 0, {});
  EXPECT_TRUE(beat.generation_ready());
  EXPECT_EQ(beat.common_checkpoint_step(), 200);
}

TEST(FirstStartTest, ReRegistrationAfterTheFirstStartOpensNoNewGeneration) {
  auto s = MakeScheduler();
  RegisterServer(*s, "server-0", {100});
  RegisterServer(*s, "server-1", {100});
  RegisterWorker(*s);
  // The same incarnation registering again (a resent Register, or every
  // node re-registering with a restarted scheduler's successor): no effect.
  RegisterServer(*s, "server-0", {100});
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}).generation(), 1u);
}

// A drain stops the scheduler and a server together: the new scheduler hears
// from the nodes that ran on (registered before) and from the server's new
// process, which did not, in either order. The server's checkpoints are
// needed for the recovery its restart calls for. (The scheduler once told
// it to discard them as an earlier run's when it came first, before any
// node had said the job ran before, and the recovery then failed.)
TEST(FirstStartTest, AServerRestartedWithTheSchedulerIsRecoveredWhicheverRegistersFirst) {
  for (bool server_first : {false, true}) {
    SCOPED_TRACE(server_first ? "the new server first" : "the nodes that ran on first");
    auto s = MakeScheduler();
    if (server_first) RegisterServer(*s, "server-0", {100, 200}, 2);
    RegisterAgain(*s, v1::SERVER, "server-1", {100, 200});
    RegisterAgain(*s, v1::WORKER, "worker-0", {});
    if (!server_first) RegisterServer(*s, "server-0", {100, 200}, 2);
    v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
    EXPECT_EQ(beat.failure(), "");
    EXPECT_EQ(beat.generation(), 1u) << "a recovery for server-0's restart";
    EXPECT_EQ(beat.restore_step(), 200u) << "the recovery goes to the newest common step";
  }
}

// The scheduler opened a recovery for server-0's new process, which had
// registered with it, and died before server-0 heard of it: every node
// registers with the next scheduler as having run before, server-0 in
// generation 0 (the one its process started in), the others in whatever
// generation the job was in, or in the new one if they heard of it.
// server-0 says it still awaits the recovery: the next scheduler opens one
// (before, none, and server-0 sat at the step it had loaded while the
// others trained on, or restored an older generation's step alone).
TEST(FirstStartTest, ARecoveryTheSchedulerDiedWithIsOpenedAgainByTheNextOne) {
  for (uint64_t others_in : {0, 1, 2}) {
    SCOPED_TRACE("the others in generation " + std::to_string(others_in));
    auto s = MakeScheduler();
    RegisterAgain(*s, v1::SERVER, "server-0", {100, 200}, 0, /*awaits_recovery=*/true);
    RegisterAgain(*s, v1::SERVER, "server-1", {100, 200, 300}, others_in);
    RegisterAgain(*s, v1::WORKER, "worker-0", {}, others_in);
    v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
    EXPECT_EQ(beat.failure(), "");
    EXPECT_EQ(beat.generation(), others_in + 1);
    EXPECT_EQ(beat.restore_step(), 200u);
    EXPECT_FALSE(beat.generation_ready());
  }
}

// Until every node has registered again, a restarted scheduler does not
// know what a new server process that came first calls for: it brings the
// server into no generation (before, the server's first beats took it into
// the generation the others reported, restoring that generation's step).
TEST(FirstStartTest, ARestartedSchedulerBringsNoServerIntoAGenerationBeforeEveryNodeRegistered) {
  auto s = MakeScheduler();
  RegisterServer(*s, "server-0", {100, 200}, 2);
  RegisterAgain(*s, v1::SERVER, "server-1", {100, 200}, 1);
  EXPECT_EQ(Beat(*s, "server-0", 0, {100, 200}, 2).generation(), 0u);
  RegisterAgain(*s, v1::WORKER, "worker-0", {}, 1);
  v1::HeartbeatResponse beat = Beat(*s, "server-0", 0, {100, 200}, 2);
  EXPECT_EQ(beat.generation(), 2u) << "the recovery server-0's restart calls for";
  EXPECT_EQ(beat.restore_step(), 200u);
}

// An async job rolls nothing back when a shard restarts: the shard goes on
// from its own newest checkpoint. After a first start over checkpoints
// (generation 1), its new process must enter that generation keeping what it
// loaded, never restore the step the job resumed from, which retention may
// have pruned (the restore fails, and so do the restarts) or which would
// silently take the shard back.
TEST(FirstStartTest, AnAsyncShardRestartedAfterTheFirstStartKeepsWhatItLoaded) {
  auto s = MakeScheduler("/ckpt", /*sync=*/false);
  RegisterServer(*s, "server-0", {10});
  RegisterServer(*s, "server-1", {10});
  RegisterWorker(*s);
  ASSERT_EQ(Beat(*s, "worker-0", 0, {}).restore_step(), 10u);
  EXPECT_FALSE(Beat(*s, "server-0", 1, {10}).keep_state());
  Beat(*s, "server-1", 1, {10});
  // server-0 restarts, having loaded its newest, 500.
  RegisterServer(*s, "server-0", {10, 500}, 2);
  v1::HeartbeatResponse beat = Beat(*s, "server-0", 0, {10, 500}, 2);
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_TRUE(beat.keep_state()) << "it would restore step " << beat.restore_step();
  EXPECT_FALSE(Beat(*s, "server-1", 1, {10, 500}).keep_state());
  // A sync job's restarted shard rolls the job back instead (RecoveryStepTest).
}

// An async job resumed over checkpoints (generation 1), then drained: the
// scheduler and server-0 restart together, and server-0's new process
// reaches the new scheduler first. It too must keep what it loaded.
TEST(FirstStartTest,
     AnAsyncShardRestartedWithTheSchedulerKeepsWhatItLoadedWhicheverRegistersFirst) {
  auto s = MakeScheduler("/ckpt", /*sync=*/false);
  RegisterServer(*s, "server-0", {10, 500}, 2);
  RegisterAgain(*s, v1::SERVER, "server-1", {10, 500}, 1);
  EXPECT_EQ(Beat(*s, "server-0", 0, {10, 500}, 2).generation(), 0u) << "before the view";
  RegisterAgain(*s, v1::WORKER, "worker-0", {}, 1);
  v1::HeartbeatResponse beat = Beat(*s, "server-0", 0, {10, 500}, 2);
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_TRUE(beat.keep_state()) << "it would restore step " << beat.restore_step();
}

// An async shard's checkpoint step counts every worker's pushes (2
// workers x 120 steps: 240); each worker goes on from its own step, which
// the shards say. Before, a job run again started every worker at 240.
TEST(FirstStartTest, AnAsyncJobRunAgainTellsEachWorkerItsOwnStep) {
  auto s = MakeScheduler("/ckpt", /*sync=*/false);
  // server-1 loaded its newest checkpoint, 280, which server-0 lacks: the
  // job resumes from 240, and until server-1 restored it, what it says of
  // worker-0's step is of 280.
  RegisterServer(*s, "server-0", {200, 240}, 1, WorkerZeroAt(120));
  RegisterServer(*s, "server-1", {200, 240, 280}, 1, WorkerZeroAt(140));
  RegisterWorker(*s);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_EQ(beat.restore_step(), 240u);
  EXPECT_FALSE(beat.has_own_step()) << "said before every shard restored the step";
  // Each restored the checkpoint of 240; worker-0's pushes of its step 119
  // reached one of them only: the step after it is its own.
  Beat(*s, "server-0", 1, {200, 240}, 1, WorkerZeroAt(120));
  EXPECT_FALSE(Beat(*s, "worker-0", 0, {}).has_own_step()) << "server-1 has not restored yet";
  Beat(*s, "server-1", 1, {200, 240}, 1, WorkerZeroAt(119));
  beat = Beat(*s, "worker-0", 0, {});
  ASSERT_TRUE(beat.generation_ready());
  ASSERT_TRUE(beat.has_own_step());
  EXPECT_EQ(beat.own_step(), 120u);
  // A step its beats said is further on: that one.
  v1::HeartbeatRequest further;
  further.set_node_id("worker-0");
  further.set_incarnation(1);
  further.set_step(125);
  ASSERT_TRUE(s->Heartbeat(&further, &beat).ok());
  EXPECT_EQ(beat.own_step(), 125u);
  // A shard that cannot tell (it loaded a checkpoint of an older build):
  // the restore step stands.
  Beat(*s, "server-1", 1, {200, 240});
  EXPECT_FALSE(Beat(*s, "worker-0", 0, {}).has_own_step());
}

// The shards outlive the scheduler: a restarted one learns each worker's
// step from them when they register again, and tells it to a worker whose
// process died before its first beat to the new scheduler.
TEST(FirstStartTest, ARestartedSchedulerLearnsAnAsyncWorkersStepFromTheShards) {
  auto s = MakeScheduler("/ckpt", /*sync=*/false);
  for (const char* id : {"server-0", "server-1"}) {
    v1::RegisterRequest request;
    v1::NodeInfo* node = request.mutable_node();
    node->set_node_id(id);
    node->set_role(v1::SERVER);
    node->set_address(std::string(id) + ":1");
    node->set_incarnation(1);
    node->set_registered_before(true);
    node->set_rank(std::string(id).back() - '0');  // the rank it had, its id's suffix here
    *node->mutable_async_worker_steps() = WorkerZeroAt(300);
    v1::RegisterResponse response;
    ASSERT_TRUE(s->Register(&request, &response).ok());
  }
  RegisterWorker(*s, /*incarnation=*/7);  // a new process, never heard from
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {}, 7);
  ASSERT_TRUE(beat.has_own_step());
  EXPECT_EQ(beat.own_step(), 300u);
}

TEST(FirstStartTest, NoCommonStepFailsNamingTheFolders) {
  auto s = MakeScheduler("/runs/job/checkpoints");
  RegisterServer(*s, "server-0", {300});
  RegisterServer(*s, "server-1", {100, 200});
  RegisterWorker(*s);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_FALSE(beat.generation_ready());
  EXPECT_THAT(beat.failure(), HasSubstr("no checkpoint step in common"));
  EXPECT_THAT(beat.failure(), HasSubstr("/runs/job/checkpoints/server-0"));
  EXPECT_THAT(beat.failure(), HasSubstr("server-1 holds steps 100,200"));
  EXPECT_EQ(s->Failure(), beat.failure());
  // A restart finds the same files: a reason the job logic does not retry.
  EXPECT_EQ(beat.failure_reason(), kReasonNoCommonCheckpoint);
  EXPECT_EQ(s->FailureReason(), kReasonNoCommonCheckpoint);
}

TEST(RecoveryStepTest, RollsBackToTheNewestStepEveryShardHolds) {
  auto s = NewJob();
  Beat(*s, "server-0", 0, {0, 100, 200, 300});
  Beat(*s, "server-1", 0, {0, 100, 200});  // its write of 300 failed
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}).common_checkpoint_step(), 200);
  // server-0 restarts having loaded its newest, 300: the job goes to 200.
  RegisterServer(*s, "server-0", {0, 100, 200, 300}, 2);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_EQ(beat.restore_step(), 200u);
}

TEST(RecoveryStepTest, TheStepSaidInCommonFallsWithADamagedCheckpointAtOnce) {
  auto s = NewJob();
  Beat(*s, "server-0", 0, {100, 200});
  Beat(*s, "server-1", 0, {100, 200});
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}).common_checkpoint_step(), 200);
  // server-0 restarts and sets its damaged 200 aside: the job goes to 100,
  // and so does the step said in common, before any shard beats again.
  RegisterServer(*s, "server-0", {100}, 2);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_EQ(beat.restore_step(), 100u);
  EXPECT_EQ(beat.common_checkpoint_step(), 100);
}

TEST(RecoveryStepTest, AWriteEndedDuringARecoveryIsNotSaidInCommon) {
  auto s = NewJob();
  Beat(*s, "server-0", 0, {100, 200, 300});
  Beat(*s, "server-1", 0, {100, 200});  // its write of 300 is slow
  // server-0 restarts having loaded 300: the job goes to 200.
  RegisterServer(*s, "server-0", {100, 200, 300}, 2);
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}).restore_step(), 200u);
  // server-1's write of 300 ends: the timeline left, deleted once restored.
  Beat(*s, "server-1", 0, {100, 200, 300});
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}).common_checkpoint_step(), 200);
  Beat(*s, "server-0", 1, {100, 200}, 2);
  Beat(*s, "server-1", 1, {100, 200});
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {});
  EXPECT_TRUE(beat.generation_ready());
  EXPECT_EQ(beat.common_checkpoint_step(), 200);
}

// With the servers' optimizer none a worker's program keeps the parameters,
// and a restarted one can put back only the state it saved at a checkpoint
// step: the job goes back there with it. Before, the restarted program went
// on from fresh values beside the others.
TEST(RecoveryStepTest, ARestartedWorkerRollsTheJobBackWhereTheWorkersKeepTheParameters) {
  for (bool workers_keep_parameters : {false, true}) {
    SCOPED_TRACE(workers_keep_parameters ? "optimizer none" : "the servers' optimizer");
    auto s = NewJob(workers_keep_parameters);
    Beat(*s, "server-0", 0, {100, 200});
    Beat(*s, "server-1", 0, {100});
    RegisterWorker(*s, /*incarnation=*/2);
    v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {}, 2);
    EXPECT_EQ(beat.generation(), workers_keep_parameters ? 1u : 0u);
    if (workers_keep_parameters) {
      EXPECT_EQ(beat.restore_step(), 100u);
    }
  }
}

TEST(RecoveryStepTest, ARestartedWorkerWithNoCheckpointInCommonRollsNothingBack) {
  auto s = NewJob(/*workers_keep_parameters=*/true);
  Beat(*s, "server-0", 0, {100});
  Beat(*s, "server-1", 0, {});
  RegisterWorker(*s, /*incarnation=*/2);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {}, 2);
  EXPECT_EQ(beat.generation(), 0u);
  EXPECT_TRUE(beat.failure().empty()) << beat.failure();
}

TEST(RecoveryStepTest, AWorkerRestartedDuringARollbackJoinsIt) {
  auto s = NewJob(/*workers_keep_parameters=*/true);
  Beat(*s, "server-0", 0, {100, 200});
  Beat(*s, "server-1", 0, {100, 200});
  RegisterServer(*s, "server-0", {100, 200}, 2);  // the job goes back to 200
  // server-1 restored 200 and deleted later steps; server-0's write of 300,
  // slow, ended meanwhile: a new generation must not pick a step gone.
  Beat(*s, "server-0", 0, {100, 200, 300}, 2);
  RegisterWorker(*s, /*incarnation=*/2);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {}, 2);
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_EQ(beat.restore_step(), 200u);
}

TEST(RecoveryStepTest, AWorkerRestartedWithTheSchedulerRollsTheJobBack) {
  // A drain: the scheduler and a worker's pod restarted together; the
  // worker's new process registers as new, the others as before.
  // The job had rolled back once before, to 50: the restarted scheduler
  // learns generation 1 from its nodes, whose shards have not beaten yet.
  auto s = MakeScheduler("/ckpt", /*sync=*/true, /*workers_keep_parameters=*/true);
  RegisterAgain(*s, v1::SERVER, "server-0", {100, 200}, 1);
  RegisterAgain(*s, v1::SERVER, "server-1", {100}, 1);
  RegisterWorker(*s, /*incarnation=*/2);
  v1::HeartbeatResponse beat = Beat(*s, "worker-0", 0, {}, 2);
  EXPECT_EQ(beat.generation(), 2u);
  EXPECT_EQ(beat.restore_step(), 100u);
}

// A job of one shard and two workers whose programs keep the parameters
// (the servers' optimizer none), every node registered; *worker1_key is
// worker-1's registration key, which its Finish presents.
std::unique_ptr<Scheduler> TwoWorkersKeepingTheParameters(std::string* worker1_key) {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.workers_keep_parameters = true;
  options.replace_silent_after_ms = 0;
  auto s = std::make_unique<Scheduler>(options, &NullMetrics());
  RegisterServer(*s, "server-0", {});
  for (const char* id : {"worker-0", "worker-1"}) {
    v1::RegisterRequest request;
    request.mutable_node()->set_node_id(id);
    request.mutable_node()->set_role(v1::WORKER);
    request.mutable_node()->set_incarnation(1);
    v1::RegisterResponse response;
    EXPECT_TRUE(s->Register(&request, &response).ok()) << id;
    *worker1_key = response.registration_key();
  }
  return s;
}

void FinishWorker1(Scheduler& s, const std::string& key, uint64_t generation) {
  v1::FinishRequest finish;
  finish.set_node_id("worker-1");
  finish.set_rank(1);
  finish.set_registration_key(key);
  finish.set_generation(generation);
  v1::FinishResponse finished;
  ASSERT_TRUE(s.Finish(&finish, &finished).ok());
}

// The same, the shard holding `steps`, once worker-1 has finished.
std::unique_ptr<Scheduler> Worker1FinishedOver(const std::vector<uint64_t>& steps) {
  std::string key;
  auto job = TwoWorkersKeepingTheParameters(&key);
  Beat(*job, "server-0", 0, steps);
  FinishWorker1(*job, key, /*generation=*/0);
  return job;
}

TEST(RecoveryStepTest, AWorkerRestartedAfterAnotherFinishedRollsNothingBack) {
  auto job = Worker1FinishedOver({100, 200});
  Scheduler& s = *job;
  RegisterWorker(s, /*incarnation=*/2);  // worker-0, its program restarted at the end
  EXPECT_EQ(Beat(s, "worker-0", 0, {}, 2).generation(), 0u)
      << "worker-1's program has ended: it could not redo the steps";
}

TEST(RecoveryStepTest, AWorkerThatFinishedBeforeARollbackItCannotRedoFailsTheJob) {
  // worker-1 evaluates after its last step while worker-0 restarts: the job
  // goes back to 100, then worker-1 finishes in the generation before.
  std::string key;
  auto job = TwoWorkersKeepingTheParameters(&key);
  Scheduler& s = *job;
  Beat(s, "server-0", 0, {100});
  RegisterWorker(s, /*incarnation=*/2);
  ASSERT_EQ(Beat(s, "worker-0", 0, {}, 2).generation(), 1u);
  FinishWorker1(s, key, /*generation=*/0);
  EXPECT_THAT(Beat(s, "worker-0", 0, {}, 2).failure(),
              ::testing::HasSubstr("worker 1 (worker-1) finished in generation 0, before the "
                                   "rollback to step 100 (generation 1)"));
}

// worker-0's beat saying its program cannot start at `start` where it is
// in `generation`: it holds its own state of `held` only.
v1::HeartbeatResponse BeatMissingState(Scheduler& s, uint64_t generation, uint64_t start,
                                       const std::vector<uint64_t>& held,
                                       uint64_t incarnation = 2) {
  v1::HeartbeatRequest request;
  request.set_node_id("worker-0");
  request.set_incarnation(incarnation);
  v1::ProgramStateMissing* missing = request.mutable_program_state_missing();
  missing->set_generation(generation);
  missing->set_start_step(start);
  for (uint64_t step : held) missing->add_held_steps(step);
  v1::HeartbeatResponse response;
  EXPECT_TRUE(s.Heartbeat(&request, &response).ok());
  return response;
}

// worker-0 restarted in a job whose programs keep the parameters, and the
// job rolled back to 100, which both shards restored (generation 1).
std::unique_ptr<Scheduler> RolledBackTo100ForARestartedWorker() {
  auto s = NewJob(/*workers_keep_parameters=*/true);
  Beat(*s, "server-0", 0, {50, 100});
  Beat(*s, "server-1", 0, {50, 100});
  RegisterWorker(*s, /*incarnation=*/2);
  EXPECT_EQ(Beat(*s, "worker-0", 0, {}, 2).restore_step(), 100u);
  Beat(*s, "server-0", 1, {50, 100});
  Beat(*s, "server-1", 1, {50, 100});
  return s;
}

// The worker was killed after the servers' checkpoint of 100 and before its
// program's own save of it was written. Before, the job went on rolling back
// to 100, where the restarted program could not start, until it failed.
TEST(HeldStateRollbackTest, AProgramThatHoldsNoStateOfTheRestoreStepTakesTheJobFurtherBack) {
  auto s = RolledBackTo100ForARestartedWorker();
  v1::HeartbeatResponse beat = BeatMissingState(*s, 1, 100, {0, 50});
  EXPECT_EQ(beat.generation(), 2u);
  EXPECT_EQ(beat.restore_step(), 50u);
  EXPECT_FALSE(beat.generation_ready()) << "until both shards restored 50";
  EXPECT_EQ(beat.common_checkpoint_step(), 50) << "100 is of the timeline left";
  // The same beat again (a lost answer) opens nothing more: it is stale.
  EXPECT_EQ(BeatMissingState(*s, 1, 100, {0, 50}).generation(), 2u);
  Beat(*s, "server-0", 2, {50});
  Beat(*s, "server-1", 2, {50});
  beat = BeatMissingState(*s, 2, 50, {0, 50});
  EXPECT_EQ(beat.generation(), 2u) << "the program holds the step it starts at now";
  EXPECT_TRUE(beat.generation_ready());
  EXPECT_TRUE(beat.failure().empty()) << beat.failure();
}

TEST(HeldStateRollbackTest, StepsPastTheStartAndStepsOneShardLacksAreNoPlaceToGoBackTo) {
  auto s = NewJob(/*workers_keep_parameters=*/true);
  Beat(*s, "server-0", 0, {50, 100, 150});
  Beat(*s, "server-1", 0, {100, 150});
  // Held: 150 of a timeline left, 50 that server-1 no longer holds.
  v1::HeartbeatResponse beat = BeatMissingState(*s, 0, 120, {50, 100, 150}, 1);
  EXPECT_EQ(beat.generation(), 1u);
  EXPECT_EQ(beat.restore_step(), 100u);
}

TEST(HeldStateRollbackTest, NoStepTheProgramAndEveryShardHoldFailsTheJobNamingBoth) {
  auto s = RolledBackTo100ForARestartedWorker();
  EXPECT_EQ(BeatMissingState(*s, 1, 100, {0, 30}).failure_reason(), "ProgramStateMissing");
  EXPECT_THAT(Beat(*s, "server-0", 1, {50, 100}).failure(),
              ::testing::AllOf(HasSubstr("worker-0's program holds its own state of steps 0,30, "
                                         "not of step 100 where the job is"),
                               HasSubstr("server-0 holds steps 50,100 in /ckpt/server-0")));
}

TEST(HeldStateRollbackTest, NothingGoesBackWhileARollbackIsRestoredOrWhereTheServersStep) {
  auto s = NewJob(/*workers_keep_parameters=*/true);
  Beat(*s, "server-0", 0, {50, 100});
  Beat(*s, "server-1", 0, {50, 100});
  RegisterWorker(*s, /*incarnation=*/2);  // the job goes back to 100
  EXPECT_EQ(BeatMissingState(*s, 1, 100, {50}).generation(), 1u)
      << "the shards have not restored 100 yet: the worker has not started";
  auto servers_optimize = NewJob(/*workers_keep_parameters=*/false);
  Beat(*servers_optimize, "server-0", 0, {50, 100});
  Beat(*servers_optimize, "server-1", 0, {50, 100});
  EXPECT_EQ(BeatMissingState(*servers_optimize, 0, 120, {50}, 1).generation(), 0u)
      << "the servers hold the parameters: a program needs no state of its own";
}

TEST(HeldStateRollbackTest, AProgramThatCannotStartAfterAnotherWorkerFinishedFailsTheJob) {
  auto job = Worker1FinishedOver({50, 100});
  EXPECT_THAT(BeatMissingState(*job, 0, 100, {50}, 1).failure(),
              HasSubstr("other workers have finished: their programs cannot go back"));
}

TEST(RecoveryStepTest, NoCommonStepAtRecoveryFailsTheJob) {
  auto s = MakeScheduler("/c");
  RegisterServer(*s, "server-0", {});
  RegisterServer(*s, "server-1", {});
  RegisterWorker(*s);
  Beat(*s, "server-1", 0, {100});
  RegisterServer(*s, "server-0", {200}, 2);
  EXPECT_THAT(Beat(*s, "worker-0", 0, {}).failure(),
              HasSubstr("server-1 holds steps 100 in /c/server-1"));
}

// A server's pod force-deleted from an unreachable node: its new process
// registers and the job rolls back, while the old one may still run. Told
// the new generation, the old one rolled its folder back too, deleting the
// checkpoints its successor wrote since, and the next recovery found no step
// in common. It is told it was replaced, and nothing else.
TEST(RecoveryStepTest, AnOldProcessOfAReplacedServerIsToldSoAndNotTheGeneration) {
  auto s = NewJob();
  Beat(*s, "server-0", 0, {0, 100});
  Beat(*s, "server-1", 0, {0, 100});
  RegisterServer(*s, "server-0", {0, 100}, 2);
  ASSERT_EQ(Beat(*s, "worker-0", 0, {}).generation(), 1u);
  v1::HeartbeatResponse old = Beat(*s, "server-0", 0, {0, 100}, /*incarnation=*/1);
  EXPECT_TRUE(old.replaced());
  EXPECT_EQ(old.generation(), 0u) << "the old process would roll back to " << old.restore_step();
  v1::HeartbeatResponse current = Beat(*s, "server-0", 0, {0, 100}, 2);
  EXPECT_FALSE(current.replaced());
  EXPECT_EQ(current.generation(), 1u);
}

}  // namespace
}  // namespace kubeps
