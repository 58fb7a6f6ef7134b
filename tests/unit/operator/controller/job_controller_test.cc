// The job logic (operator/controller/job_controller.h) against a fake
// cluster that records every Create and Delete and lets the test decide
// each replica's phase and when the scheduler's address is known.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/termination_message.h"
#include "operator/controller/job_controller.h"
#include "tests/unit/operator/controller/fake_cluster.h"

namespace kubeps::controller {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class JobControllerTest : public ::testing::Test {
 protected:
  void Start(api::RestartPolicy policy = api::RestartPolicy::kOnFailure, int backoff_limit = 3) {
    controller_ = std::make_unique<JobController>(
        Job(policy, backoff_limit), &cluster_,
        [this](const ReplicaName& name, const std::string& address) {
          ReplicaLaunch launch;
          launch.name = name;
          launch.binary = name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
          launch.env["KUBEPS_SCHEDULER_ADDRESS"] = address;
          return launch;
        });
  }
  // Every replica created and running.
  void StartRunning(api::RestartPolicy policy = api::RestartPolicy::kOnFailure,
                    int backoff_limit = 3) {
    Start(policy, backoff_limit);
    cluster_.address = "127.0.0.1:5000";
    controller_->Reconcile(0);
    cluster_.SetAll(ReplicaPhase::kRunning);
    JobStatus status = controller_->Reconcile(1);
    ASSERT_EQ(status.phase, JobPhase::kRunning) << status.message;
    cluster_.created.clear();
    cluster_.deleted.clear();
    cluster_.batches.clear();
    cluster_.graces.clear();
  }

  static LaunchBuilder Launch() {
    return [](const ReplicaName& name, const std::string& address) {
      ReplicaLaunch launch;
      launch.name = name;
      launch.binary = name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
      return launch;
    };
  }

  FakeCluster cluster_;
  std::unique_ptr<JobController> controller_;
};

TEST_F(JobControllerTest, DesiredReplicasSchedulerFirst) {
  Start();
  auto names = controller_->DesiredReplicas();
  std::vector<std::string> strings;
  for (auto& n : names) strings.push_back(n.ToString());
  EXPECT_THAT(strings, ElementsAre("scheduler-0", "server-0", "server-1", "worker-0", "worker-1"));
}

TEST_F(JobControllerTest, CreatesSchedulerFirstAndTheRestOnceItsAddressIsKnown) {
  Start();
  JobStatus status = controller_->Reconcile(0);
  EXPECT_THAT(cluster_.created, ElementsAre("scheduler-0"));
  EXPECT_EQ(status.phase, JobPhase::kCreated);
  EXPECT_FALSE(status.finished());

  // Address still unknown: nothing more, and the scheduler is not created twice.
  status = controller_->Reconcile(100);
  EXPECT_THAT(cluster_.created, ElementsAre("scheduler-0"));
  cluster_.Set(Scheduler(), ReplicaPhase::kRunning);
  status = controller_->Reconcile(200);
  EXPECT_THAT(cluster_.created, ElementsAre("scheduler-0"));

  cluster_.address = "10.1.2.3:7000";
  status = controller_->Reconcile(300);
  EXPECT_THAT(cluster_.created,
              ElementsAre("scheduler-0", "server-0", "server-1", "worker-0", "worker-1"));
  for (size_t i = 1; i < cluster_.launches.size(); ++i) {
    EXPECT_EQ(cluster_.launches[i].env["KUBEPS_SCHEDULER_ADDRESS"], "10.1.2.3:7000")
        << cluster_.launches[i].name.ToString();
  }
  EXPECT_THAT(cluster_.deleted, IsEmpty());
}

TEST_F(JobControllerTest, ReconcileIsIdempotent) {
  Start();
  cluster_.address = "10.1.2.3:7000";
  controller_->Reconcile(0);
  ASSERT_EQ(cluster_.created.size(), 5u);
  // Pending replicas are not created again.
  JobStatus first = controller_->Reconcile(10);
  JobStatus second = controller_->Reconcile(20);
  EXPECT_EQ(cluster_.created.size(), 5u);
  EXPECT_EQ(first.phase, second.phase);
  EXPECT_EQ(first.reason, second.reason);

  cluster_.SetAll(ReplicaPhase::kRunning);
  JobStatus running = controller_->Reconcile(30);
  EXPECT_EQ(running.phase, JobPhase::kRunning);
  EXPECT_EQ(running.reason, "JobRunning");
  EXPECT_EQ(running.workers.active, 2);
  EXPECT_EQ(running.servers.active, 2);
  EXPECT_EQ(running.scheduler.active, 1);
  for (int i = 0; i < 3; ++i) {
    JobStatus again = controller_->Reconcile(40 + i);
    EXPECT_EQ(again.phase, JobPhase::kRunning);
    EXPECT_EQ(again.message, running.message);
  }
  EXPECT_EQ(cluster_.created.size(), 5u);
  EXPECT_THAT(cluster_.deleted, IsEmpty());
}

TEST_F(JobControllerTest, DeletedReplicaIsCreatedAgain) {
  StartRunning();
  cluster_.replicas.erase(Worker(0));  // vanished (pod deleted by hand)
  controller_->Reconcile(100);
  EXPECT_THAT(cluster_.created, ElementsAre("worker-0"));
}

TEST_F(JobControllerTest, FailedWorkerUnderOnFailureIsRecreated) {
  StartRunning();
  cluster_.Set(Worker(1), ReplicaPhase::kFailed, 137);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_THAT(cluster_.created, ElementsAre("worker-1"));
  EXPECT_THAT(cluster_.deleted, IsEmpty());
  EXPECT_EQ(status.phase, JobPhase::kRestarting);
  EXPECT_EQ(status.reason, "ReplicaRestarted");
  EXPECT_EQ(status.restarts, 1);
  EXPECT_THAT(status.message, HasSubstr("worker-1 exited with code 137"));
  EXPECT_FALSE(status.finished());
  // The re-created worker gets the scheduler's address like the first one.
  EXPECT_EQ(cluster_.launches.back().env["KUBEPS_SCHEDULER_ADDRESS"], "127.0.0.1:5000");

  // Nothing changed since: no further Create.
  status = controller_->Reconcile(200);
  EXPECT_THAT(cluster_.created, ElementsAre("worker-1"));
  EXPECT_EQ(status.restarts, 1);
  cluster_.Set(Worker(1), ReplicaPhase::kRunning);
  status = controller_->Reconcile(300);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
}

TEST_F(JobControllerTest, BackoffLimitCountsRestartsOfTheWholeJob) {
  StartRunning(api::RestartPolicy::kOnFailure, 2);
  cluster_.Set(Worker(0), ReplicaPhase::kFailed, 1);
  EXPECT_EQ(controller_->Reconcile(100).phase, JobPhase::kRestarting);
  cluster_.Set(Server(1), ReplicaPhase::kFailed, 137);
  EXPECT_EQ(controller_->Reconcile(200).phase, JobPhase::kRestarting);
  EXPECT_THAT(cluster_.created, ElementsAre("worker-0", "server-1"));

  cluster_.Set(Worker(0), ReplicaPhase::kFailed, 1);
  JobStatus status = controller_->Reconcile(300);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "BackoffLimitExceeded");
  EXPECT_THAT(status.message, HasSubstr("worker-0"));
  EXPECT_THAT(cluster_.created, ElementsAre("worker-0", "server-1"));
  EXPECT_TRUE(cluster_.replicas.empty()) << "a failed job leaves replicas running";
}

TEST_F(JobControllerTest, FailureUnderNeverFailsTheJobAndDeletesEveryReplica) {
  StartRunning(api::RestartPolicy::kNever);
  cluster_.Set(Worker(0), ReplicaPhase::kFailed, 1);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_TRUE(status.finished());
  EXPECT_EQ(status.reason, "RestartPolicyNever");
  EXPECT_THAT(status.message, HasSubstr("worker-0 exited with code 1"));
  EXPECT_THAT(cluster_.created, IsEmpty());
  std::vector<std::string> deleted = cluster_.deleted;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_THAT(deleted, ElementsAre("scheduler-0", "server-0", "server-1", "worker-0", "worker-1"));
  EXPECT_TRUE(cluster_.replicas.empty());

  // It stays failed and starts nothing afterwards.
  status = controller_->Reconcile(200);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "RestartPolicyNever");
  EXPECT_THAT(cluster_.created, IsEmpty());
}

TEST_F(JobControllerTest, PermanentExitCodeFailsTheJob) {
  StartRunning(api::RestartPolicy::kExitCode);
  cluster_.Set(Server(0), ReplicaPhase::kFailed, 143);
  EXPECT_EQ(controller_->Reconcile(100).phase, JobPhase::kRestarting);
  EXPECT_THAT(cluster_.created, ElementsAre("server-0"));
  cluster_.Set(Worker(1), ReplicaPhase::kFailed, 2);
  JobStatus status = controller_->Reconcile(200);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "PermanentExitCode");
  EXPECT_THAT(status.message, HasSubstr("worker-1 exited with code 2"));
}

TEST_F(JobControllerTest, ADivergedWorkerFailsTheJobAtOnceWithItsReason) {
  StartRunning(api::RestartPolicy::kOnFailure, 3);
  cluster_.Set(Worker(1), ReplicaPhase::kFailed, 1);
  cluster_.replicas[Worker(1)].reason = "NonFiniteLoss";
  cluster_.replicas[Worker(1)].message = "the loss of step 3 is nan: the model diverged";
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "NonFiniteLoss");
  EXPECT_THAT(status.message, HasSubstr("worker-1 failed and is not restarted"));
  EXPECT_THAT(status.message, HasSubstr("the loss of step 3 is nan"));
  EXPECT_THAT(cluster_.created, IsEmpty()) << "a diverged worker was restarted";
}

// Without checkpoints a lost shard cannot be rebuilt by any restart: the
// first server that says so ends the job, before the backoffLimit is spent.
TEST_F(JobControllerTest, AShardLostWithoutCheckpointsFailsTheJobAtOnceSayingSo) {
  StartRunning(api::RestartPolicy::kOnFailure, 3);
  cluster_.Set(Server(1), ReplicaPhase::kFailed, 1);
  cluster_.replicas[Server(1)].reason = kReasonShardStateLost;
  cluster_.replicas[Server(1)].message = "it keeps no checkpoints (spec.checkpoint.path is empty)";
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, kReasonShardStateLost);
  EXPECT_THAT(status.message, HasSubstr("server-1 failed and is not restarted"));
  EXPECT_THAT(status.message, HasSubstr("spec.checkpoint.path is empty"));
  EXPECT_THAT(cluster_.created, IsEmpty()) << "a server that cannot recover was restarted";
}

TEST(TerminationMessageTest, ReasonIsTheLeadingCamelCaseWord) {
  std::string reason, message;
  ParseTerminationMessage("NonFiniteGradient: key 7 is not finite\nmore", &reason, &message);
  EXPECT_EQ(reason, "NonFiniteGradient");
  EXPECT_EQ(message, "key 7 is not finite");
  ParseTerminationMessage("panic: out of memory", &reason, &message);
  EXPECT_EQ(reason, "");
  EXPECT_EQ(message, "panic: out of memory");
}

TEST_F(JobControllerTest, AllWorkersSucceededThenServersGetKLingerMsToExit) {
  StartRunning();
  cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(1000);
  EXPECT_EQ(status.phase, JobPhase::kRunning) << "one worker left";
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);

  status = controller_->Reconcile(2000);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.reason, "WorkersSucceeded");
  EXPECT_EQ(status.workers.succeeded, 2);
  status = controller_->Reconcile(2000 + JobController::kLingerMs - 1);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_THAT(cluster_.deleted, IsEmpty()) << "servers deleted before their linger time";

  status = controller_->Reconcile(2000 + JobController::kLingerMs);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded);
  EXPECT_EQ(status.reason, "JobSucceeded");
  EXPECT_THAT(status.message, HasSubstr("mnist"));
  EXPECT_TRUE(status.finished());
  std::vector<std::string> deleted = cluster_.deleted;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_THAT(deleted, ElementsAre("scheduler-0", "server-0", "server-1", "worker-0", "worker-1"));
  EXPECT_THAT(cluster_.created, IsEmpty());
}

// Ctrl-C, a suspended job, a failed one: every replica is told to stop in
// one batch, which shares one grace period, workers first so that none
// trains on against servers that are going.
TEST_F(JobControllerTest, DeleteAllStopsEveryReplicaInOneBatchWorkersFirst) {
  StartRunning();
  controller_->DeleteAll(300);
  ASSERT_EQ(cluster_.batches.size(), 1u) << "replicas deleted one by one";
  EXPECT_THAT(cluster_.batches[0],
              ElementsAre("worker-0", "worker-1", "server-0", "server-1", "scheduler-0"));
  EXPECT_THAT(cluster_.graces, ElementsAre(300));
  EXPECT_TRUE(cluster_.replicas.empty());
}

TEST_F(JobControllerTest, AFailedJobStopsItsReplicasInOneBatchWorkersFirst) {
  StartRunning(api::RestartPolicy::kNever);
  cluster_.Set(Server(1), ReplicaPhase::kFailed, 1);
  ASSERT_EQ(controller_->Reconcile(100).phase, JobPhase::kFailed);
  ASSERT_EQ(cluster_.batches.size(), 1u) << "replicas deleted one by one";
  EXPECT_THAT(cluster_.batches[0],
              ElementsAre("worker-0", "worker-1", "server-0", "server-1", "scheduler-0"));
  EXPECT_THAT(cluster_.graces, ElementsAre(Cluster::kBackendGrace));
}

// Nobody will tell servers whose scheduler is gone that the job is over:
// they are stopped in the pass that sees it, not after kLingerMs.
TEST_F(JobControllerTest, ServersWhoseSchedulerIsGoneAreStoppedAsSoonAsTheWorkersAreDone) {
  for (int scheduler_exit : {0, 137}) {
    SCOPED_TRACE("scheduler exit code " + std::to_string(scheduler_exit));
    cluster_ = FakeCluster();
    StartRunning();
    cluster_.Set(Scheduler(),
                 scheduler_exit == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed,
                 scheduler_exit);
    cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
    cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
    JobStatus status = controller_->Reconcile(1000);
    EXPECT_EQ(status.phase, JobPhase::kSucceeded) << status.message;
    EXPECT_THAT(cluster_.created, IsEmpty()) << "the scheduler was restarted after the job";
    EXPECT_TRUE(cluster_.replicas.empty());
  }
}

// A scheduler that ended with JobOver waited for every server to hear it:
// they are on their way out (a final checkpoint each) and are waited for.
// One that gave up waiting (JobOverUnheard: a frozen or cut-off server)
// left servers that will never hear it: they are stopped at once.
TEST_F(JobControllerTest, ServersAreWaitedForOnlyIfTheSchedulerSaysTheyHeardTheJobIsOver) {
  for (const char* reason : {kReasonJobOver, kReasonJobOverUnheard}) {
    SCOPED_TRACE(reason);
    cluster_ = FakeCluster();
    StartRunning();
    cluster_.Set(Scheduler(), ReplicaPhase::kSucceeded);
    cluster_.replicas[Scheduler()].reason = reason;
    cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
    cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
    JobStatus status = controller_->Reconcile(1000);
    if (std::string(reason) == kReasonJobOver) {
      EXPECT_EQ(status.phase, JobPhase::kRunning) << status.message;
      EXPECT_EQ(status.message, "every worker finished; waiting for server-0, server-1 to exit");
      EXPECT_THAT(cluster_.deleted, IsEmpty());
    } else {
      EXPECT_EQ(status.phase, JobPhase::kSucceeded) << status.message;
      EXPECT_TRUE(cluster_.replicas.empty());
    }
    EXPECT_THAT(cluster_.created, IsEmpty());
  }
}

// The servers have exited: the scheduler would wait on for servers that
// died before hearing the job was over. It gets kSchedulerLingerMs.
TEST_F(JobControllerTest, TheSchedulerLeftAloneGetsKSchedulerLingerMs) {
  StartRunning();
  cluster_.Set(Server(0), ReplicaPhase::kSucceeded);
  cluster_.Set(Server(1), ReplicaPhase::kFailed, 137);
  cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(1000);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.message, "every worker finished; waiting for scheduler-0 to exit");
  EXPECT_THAT(cluster_.deleted, IsEmpty());
  status = controller_->Reconcile(1000 + JobController::kSchedulerLingerMs);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded) << status.message;
  EXPECT_TRUE(cluster_.replicas.empty());
}

TEST_F(JobControllerTest, WaitingForServersNamesThem) {
  StartRunning();
  cluster_.Set(Server(0), ReplicaPhase::kSucceeded);
  cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
  EXPECT_EQ(controller_->Reconcile(1000).message,
            "every worker finished; waiting for scheduler-0, server-1 to exit");
}

// "every replica is running" only when it is true.
TEST_F(JobControllerTest, RunningMessageNamesEveryReplicaThatIsNotRunning) {
  StartRunning();
  cluster_.Set(Scheduler(), ReplicaPhase::kPending);
  cluster_.Set(Server(1), ReplicaPhase::kPending);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.message, "the job is running, but scheduler-0 is pending, server-1 is pending");
  cluster_.SetAll(ReplicaPhase::kRunning);
  EXPECT_EQ(controller_->Reconcile(200).message, "every replica is running");
}

TEST_F(JobControllerTest, TwoRestartsInOnePassAreBothReported) {
  StartRunning();
  cluster_.Set(Server(0), ReplicaPhase::kFailed, 143);
  cluster_.Set(Worker(1), ReplicaPhase::kFailed, 137);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kRestarting);
  EXPECT_THAT(status.message, HasSubstr("server-0 exited with code 143; restarting it (restart 1"));
  EXPECT_THAT(status.message, HasSubstr("worker-1 exited with code 137; restarting it (restart 2"));
}

TEST_F(JobControllerTest, SucceedsAtOnceWhenServersHaveAlreadyExited) {
  StartRunning();
  cluster_.SetAll(ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(500);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded);
  EXPECT_EQ(status.reason, "JobSucceeded");
  EXPECT_TRUE(cluster_.replicas.empty());
}

TEST_F(JobControllerTest, ServersExitingZeroBeforeWorkersAreDoneIsNotAFailure) {
  StartRunning(api::RestartPolicy::kNever);
  // The scheduler saw every worker finish and told the servers; their exit
  // is observed before the workers' own.
  for (const ReplicaName& name : {Scheduler(), Server(0), Server(1)}) {
    cluster_.Set(name, ReplicaPhase::kSucceeded);
    cluster_.replicas[name].reason = "JobOver";
  }
  JobStatus status = controller_->Reconcile(100);
  EXPECT_NE(status.phase, JobPhase::kFailed) << status.reason << ": " << status.message;
  EXPECT_FALSE(status.finished());
  EXPECT_THAT(cluster_.created, IsEmpty()) << "an exited server was re-created";
  EXPECT_THAT(cluster_.deleted, IsEmpty());
  EXPECT_EQ(status.servers.succeeded, 2);

  cluster_.Set(Worker(0), ReplicaPhase::kSucceeded);
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
  status = controller_->Reconcile(200);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded);
}

// The scheduler ends with JobOver only once every worker has told it that it
// finished: a worker killed after that (on its way out; the test saw this
// under late watch events) lost nothing. Before, the job logic restarted it
// against a scheduler that was gone, and the job stayed Running.
TEST_F(JobControllerTest, AWorkerKilledAfterTheSchedulerSawEveryWorkerFinishIsNotRestarted) {
  StartRunning();
  for (const ReplicaName& name : {Scheduler(), Server(0), Server(1)}) {
    cluster_.Set(name, ReplicaPhase::kSucceeded);
    cluster_.replicas[name].reason = kReasonJobOver;
  }
  cluster_.Set(Worker(0), ReplicaPhase::kFailed, 137);
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded) << status.reason << ": " << status.message;
  EXPECT_THAT(cluster_.created, IsEmpty()) << "a worker was restarted after the job was over";
}

// A worker restarted a moment before the operator saw the scheduler's
// JobOver would wait for it in vain: it gets the servers' linger, no more.
TEST_F(JobControllerTest, AWorkerStillThereAfterJobOverIsStoppedAfterTheLinger) {
  StartRunning();
  for (const ReplicaName& name : {Scheduler(), Server(0), Server(1)}) {
    cluster_.Set(name, ReplicaPhase::kSucceeded);
    cluster_.replicas[name].reason = kReasonJobOver;
  }
  cluster_.Set(Worker(1), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.message, "the scheduler saw every worker finish; waiting for worker-0 to exit");
  EXPECT_THAT(cluster_.deleted, IsEmpty());
  status = controller_->Reconcile(100 + JobController::kLingerMs);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded) << status.message;
  EXPECT_THAT(cluster_.deleted, Contains("worker-0"));
  EXPECT_THAT(cluster_.created, IsEmpty());
}

// A SIGTERM handler that exits 0, a bug: before, the job logic took such a
// server for finished, never started it again, and the workers burnt the
// backoffLimit against its dead address.
TEST_F(JobControllerTest, AServerEndingBeforeTheWorkersWithoutJobOverIsRestarted) {
  StartRunning();
  cluster_.Set(Server(1), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kRestarting) << status.message;
  EXPECT_THAT(cluster_.created, ElementsAre("server-1"));
  EXPECT_THAT(status.message,
              HasSubstr("server-1 exited with code 0 before the workers finished; restarting it"));
}

TEST_F(JobControllerTest, TheSchedulerEndingBeforeTheWorkersUnderNeverFailsTheJobNamingIt) {
  StartRunning(api::RestartPolicy::kNever);
  cluster_.Set(Scheduler(), ReplicaPhase::kSucceeded);
  JobStatus status = controller_->Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "RestartPolicyNever");
  EXPECT_THAT(status.message,
              HasSubstr("scheduler-0 exited with code 0 before the workers finished"));
  EXPECT_THAT(cluster_.created, IsEmpty());
}

TEST_F(JobControllerTest, CreateFailureFailsTheJob) {
  Start();
  cluster_.address = "10.1.2.3:7000";
  cluster_.fail_create.insert("worker-1");
  JobStatus status = controller_->Reconcile(0);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "CreateFailed");
  EXPECT_THAT(status.message, HasSubstr("worker-1"));
  EXPECT_THAT(status.message, HasSubstr("no room on any node"));
  // Stays failed without trying again.
  size_t creates = cluster_.created.size();
  EXPECT_EQ(controller_->Reconcile(100).phase, JobPhase::kFailed);
  EXPECT_EQ(cluster_.created.size(), creates);
}

// kUnavailable from the backend is a passing failure: the next pass tries
// again, whether the replica is new or a restart.
TEST_F(JobControllerTest, AnUnavailableBackendIsTriedAgainNotAFailure) {
  Start();
  cluster_.address = "10.1.2.3:7000";
  cluster_.unavailable.insert("worker-1");
  EXPECT_EQ(controller_->Reconcile(0).phase, JobPhase::kCreated);
  EXPECT_FALSE(cluster_.replicas.count(Worker(1)));
  cluster_.unavailable.clear();
  controller_->Reconcile(100);
  EXPECT_TRUE(cluster_.replicas.count(Worker(1)));

  cluster_.SetAll(ReplicaPhase::kRunning);
  cluster_.Set(Worker(0), ReplicaPhase::kFailed, 1);
  cluster_.unavailable.insert("worker-0");
  JobStatus status = controller_->Reconcile(200);
  EXPECT_NE(status.phase, JobPhase::kFailed);
  EXPECT_EQ(cluster_.replicas[Worker(0)].restarts, 0);
  cluster_.unavailable.clear();
  status = controller_->Reconcile(300);
  EXPECT_EQ(status.phase, JobPhase::kRestarting);
  EXPECT_EQ(cluster_.replicas[Worker(0)].restarts, 1);
}

TEST_F(JobControllerTest, FailedJobLeavesNoReplicaRunning) {
  // Like the other failure paths (Never, BackoffLimitExceeded), a job that
  // failed because a replica could not be started must not leave the
  // replicas it already started running.
  Start();
  cluster_.address = "10.1.2.3:7000";
  cluster_.fail_create.insert("worker-1");
  JobStatus status = controller_->Reconcile(0);
  ASSERT_EQ(status.phase, JobPhase::kFailed);
  controller_->Reconcile(100);
  EXPECT_TRUE(cluster_.replicas.empty())
      << "BUG: after CreateFailed " << cluster_.replicas.size()
      << " replicas are still running (no DeleteAll on that path)";
}

TEST_F(JobControllerTest, SucceededJobStaysSucceeded) {
  // Level-triggered: reconciling a finished job again must not start it anew.
  StartRunning();
  cluster_.SetAll(ReplicaPhase::kSucceeded);
  ASSERT_EQ(controller_->Reconcile(500).phase, JobPhase::kSucceeded);
  ASSERT_TRUE(cluster_.replicas.empty());
  cluster_.created.clear();
  JobStatus status = controller_->Reconcile(600);
  EXPECT_EQ(status.phase, JobPhase::kSucceeded)
      << "BUG: got " << ToString(status.phase) << " (" << status.reason << ")";
  EXPECT_THAT(cluster_.created, IsEmpty())
      << "BUG: reconciling a succeeded job re-created its replicas";
}

// cleanPodPolicy Running (Kubeflow's default) keeps finished replicas, for
// their logs, and deletes only the live ones; None keeps everything.
TEST_F(JobControllerTest, CleanPodPolicyRunningKeepsFinishedReplicas) {
  api::TrainingJob job = Job(api::RestartPolicy::kNever);
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kRunning;
  JobController controller(job, &cluster_, Launch());
  cluster_.address = "10.0.0.1:7000";
  controller.Reconcile(0);
  cluster_.SetAll(ReplicaPhase::kRunning);
  cluster_.Set({ReplicaRole::kWorker, 1}, ReplicaPhase::kFailed, 1);
  JobStatus status = controller.Reconcile(10);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(cluster_.replicas.size(), 1u);
  EXPECT_TRUE(cluster_.replicas.count({ReplicaRole::kWorker, 1}));
}

TEST_F(JobControllerTest, CleanPodPolicyNoneKeepsEverything) {
  api::TrainingJob job = Job(api::RestartPolicy::kNever);
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  JobController controller(job, &cluster_, Launch());
  cluster_.address = "10.0.0.1:7000";
  controller.Reconcile(0);
  cluster_.SetAll(ReplicaPhase::kRunning);
  cluster_.Set({ReplicaRole::kWorker, 0}, ReplicaPhase::kFailed, 2);
  EXPECT_EQ(controller.Reconcile(10).phase, JobPhase::kFailed);
  EXPECT_EQ(cluster_.replicas.size(), 5u);
  EXPECT_TRUE(cluster_.deleted.empty());
}

TEST_F(JobControllerTest, ActiveDeadlineFailsTheJob) {
  api::TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = 5;
  JobController controller(job, &cluster_, Launch());
  cluster_.address = "10.0.0.1:7000";
  controller.set_start_ms(1000);
  controller.Reconcile(1000);
  cluster_.SetAll(ReplicaPhase::kRunning);
  EXPECT_EQ(controller.Reconcile(5999).phase, JobPhase::kRunning);
  JobStatus status = controller.Reconcile(6001);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "DeadlineExceeded");
  EXPECT_NE(status.message.find("activeDeadlineSeconds (5 s)"), std::string::npos)
      << status.message;
  EXPECT_TRUE(cluster_.replicas.empty());
}

}  // namespace
}  // namespace kubeps::controller
