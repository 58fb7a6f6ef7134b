// What a job that has run shows while one of its worker pods is made (an
// elastic job scaled up, a pod deleted from outside by a drain): it trains on,
// so it stays Running and names the worker, instead of going back to
// Created ("starting replicas") as if it had never started. An elastic job
// does not fail for a worker pod that cannot start while it keeps its
// minReplicas: it trains on without it.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/job_controller.h"
#include "tests/unit/operator/controller/fake_cluster.h"

namespace kubeps::controller {
namespace {

using ::testing::HasSubstr;

LaunchBuilder Launch() {
  return [](const ReplicaName& name, const std::string&) {
    ReplicaLaunch launch;
    launch.name = name;
    return launch;
  };
}

api::TrainingJob ElasticJob(int workers, int min_workers, int max_workers) {
  api::TrainingJob job = Job();
  job.spec.worker.replicas = workers;
  job.spec.elastic.min_replicas = min_workers;
  job.spec.elastic.max_replicas = max_workers;
  return job;
}

class RunningJobTest : public ::testing::Test {
 protected:
  // Every replica of `job` made and running, the job Running.
  void StartRunning(const api::TrainingJob& job) {
    controller_ = std::make_unique<JobController>(job, &cluster_, Launch());
    cluster_.address = "10.0.0.1:7000";
    controller_->Reconcile(0);
    cluster_.SetAll(ReplicaPhase::kRunning);
    ASSERT_EQ(controller_->Reconcile(1000).phase, JobPhase::kRunning);
    cluster_.created.clear();
  }
  // The operator makes a controller for each pass, from the spec as it is
  // now and from what the job's status says of it.
  JobStatus PassOfTheOperator(const api::TrainingJob& job, const api::TrainingJobStatus& recorded,
                              int64_t now_ms) {
    controller_ = std::make_unique<JobController>(job, &cluster_, Launch());
    controller_->set_has_run(recorded.HasRun());
    controller_->set_timers(timers_);
    JobStatus status = controller_->Reconcile(now_ms);
    timers_ = controller_->timers();
    return status;
  }
  // An elastic job of 2 to 4 workers (at least 2 running), 5 s to start a
  // pod, running with 2 and scaled to 3 at 2 s, whose new worker-2 is stuck
  // for `problem`.
  api::TrainingJob ScaledUpWithAStuckWorker(const std::string& problem) {
    api::TrainingJob job = ElasticJob(2, 2, 4);
    job.spec.run_policy.pod_start_timeout_seconds = 5;
    StartRunning(job);
    job.spec.worker.replicas = 3;
    PassOfTheOperator(job, Recorded(JobPhase::kRunning), 2000);
    cluster_.replicas[Worker(2)].created_ms = 2000;
    cluster_.replicas[Worker(2)].start_problem = problem;
    return job;
  }
  // A status of `phase`; `ran` adds the Running condition of a job that ran.
  static api::TrainingJobStatus Recorded(JobPhase phase, bool ran = false) {
    api::TrainingJobStatus status;
    status.phase = phase;
    api::SetPhaseCondition(&status.conditions, JobPhase::kCreated, "JobCreated", "",
                           "2026-12-07T10:00:00Z");
    if (ran)
      api::SetPhaseCondition(&status.conditions, JobPhase::kRunning, "JobRunning", "",
                             "2026-12-07T10:00:05Z");
    api::SetPhaseCondition(&status.conditions, phase, "", "", "2026-12-07T10:01:00Z");
    return status;
  }

  FakeCluster cluster_;
  std::unique_ptr<JobController> controller_;
  JobController::Timers timers_;  // as the operator carries them
};

TEST_F(RunningJobTest, AnElasticJobScaledUpStaysRunningWhileItsNewWorkerStarts) {
  StartRunning(ElasticJob(2, 1, 4));
  // kubeps scale: the runner keeps its controller.
  controller_->SetDesiredWorkers(3);
  JobStatus status = controller_->Reconcile(2000);
  EXPECT_EQ(cluster_.created, std::vector<std::string>{"worker-2"});
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.reason, "JobRunning");
  EXPECT_EQ(status.message, "the job is running, but worker-2 is starting");

  // kubectl scale on Kubernetes: the spec says 3, the status says Running.
  status = PassOfTheOperator(ElasticJob(3, 1, 4), Recorded(JobPhase::kRunning), 3000);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.message, "the job is running, but worker-2 is pending");
  cluster_.Set(Worker(2), ReplicaPhase::kRunning);
  EXPECT_EQ(PassOfTheOperator(ElasticJob(3, 1, 4), Recorded(JobPhase::kRunning), 4000).message,
            "every replica is running");
}

TEST_F(RunningJobTest, AJobWhoseWorkerPodWasDeletedStaysRunningWhileItIsMadeAgain) {
  StartRunning(Job());
  cluster_.replicas.erase(Worker(1));  // evicted by a drain
  JobStatus status = controller_->Reconcile(2000);
  EXPECT_EQ(cluster_.created, std::vector<std::string>{"worker-1"});
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_EQ(status.message, "the job is running, but worker-1 is starting");
  // So after a restart the job counted, once it had run.
  EXPECT_EQ(PassOfTheOperator(Job(), Recorded(JobPhase::kRestarting, true), 3000).phase,
            JobPhase::kRunning);
}

TEST_F(RunningJobTest, AJobThatHasNotRunIsCreatedUntilEveryWorkerRuns) {
  StartRunning(Job());
  cluster_.Set(Worker(1), ReplicaPhase::kPending);
  for (const api::TrainingJobStatus& recorded :
       {Recorded(JobPhase::kCreated), Recorded(JobPhase::kRestarting)}) {
    JobStatus status = PassOfTheOperator(Job(), recorded, 2000);
    EXPECT_EQ(status.phase, JobPhase::kCreated);
    EXPECT_EQ(status.message, "starting replicas");
  }
}

TEST_F(RunningJobTest, AnElasticJobTrainsOnPastAWorkerThatCannotStartWhileItKeepsItsMinimum) {
  // Scaled up, and no node has room for the new worker.
  api::TrainingJob job = ScaledUpWithAStuckWorker("Unschedulable");
  cluster_.replicas[Worker(2)].start_problem_message =
      "0/1 nodes are available: 1 Insufficient cpu.";
  JobStatus status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 60'000);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_THAT(status.message, HasSubstr("worker-2 cannot start (Unschedulable: 0/1 nodes are "
                                        "available: 1 Insufficient cpu.)"));
  EXPECT_THAT(status.message, HasSubstr("the job trains on without it while it has "
                                        "elasticPolicy.minReplicas (2) workers"));

  // One it needs for its minimum fails the job once the timeout has passed
  // since it was first seen needed.
  cluster_.Set(Worker(1), ReplicaPhase::kPending);
  cluster_.replicas[Worker(1)].created_ms = 61'000;
  cluster_.replicas[Worker(1)].start_problem = "Unschedulable";
  status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 62'000);
  EXPECT_NE(status.phase, JobPhase::kFailed);
  status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 66'000);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "Unschedulable");
}

// Only room comes by itself: a worker whose image cannot be pulled would
// not start when it does, and the timeout says so as for any other job.
TEST_F(RunningJobTest, AnElasticJobFailsByTheTimeoutForAWorkerThatRoomWouldNotStart) {
  api::TrainingJob job = ScaledUpWithAStuckWorker("ImagePullBackOff");
  JobStatus status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 60'000);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "ImagePullFailed");
  EXPECT_THAT(status.message, HasSubstr("worker-2"));
}

// A worker the job trained on without, then needed for its minReplicas (a
// running one was evicted): podStartTimeoutSeconds counts from then. Before,
// from the pod's creation long before: the job failed at once.
TEST_F(RunningJobTest, AWorkerTheJobTrainedOnWithoutHasTheWholeTimeoutOnceItIsNeeded) {
  api::TrainingJob job = ScaledUpWithAStuckWorker("Unschedulable");
  EXPECT_EQ(PassOfTheOperator(job, Recorded(JobPhase::kRunning), 60'000).phase, JobPhase::kRunning);
  cluster_.replicas.erase(Worker(1));  // evicted: 1 running, under the minimum
  JobStatus status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 61'000);
  EXPECT_NE(status.phase, JobPhase::kFailed) << status.message;
  status = PassOfTheOperator(job, Recorded(JobPhase::kRunning), 65'500);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "Unschedulable");
  EXPECT_THAT(status.message, HasSubstr("worker-2"));
}

// An operator restarted meanwhile has lost when the job last did without
// the worker: the clock starts at the first pass that sees it needed, not
// at the pod's creation long before.
TEST_F(RunningJobTest, AfterAnOperatorRestartTheClockStartsWhenTheWorkerIsSeenNeeded) {
  api::TrainingJob job = ScaledUpWithAStuckWorker("Unschedulable");
  PassOfTheOperator(job, Recorded(JobPhase::kRunning), 60'000);
  timers_ = JobController::Timers{};  // a new operator
  cluster_.replicas.erase(Worker(1));
  EXPECT_NE(PassOfTheOperator(job, Recorded(JobPhase::kRunning), 70'000).phase, JobPhase::kFailed);
  EXPECT_NE(PassOfTheOperator(job, Recorded(JobPhase::kRunning), 74'000).phase, JobPhase::kFailed);
  EXPECT_EQ(PassOfTheOperator(job, Recorded(JobPhase::kRunning), 75'000).phase, JobPhase::kFailed);
}

// A worker scaled away still computes until the scheduler's change step,
// which may be minutes away (kubeps scale --at-step, or steps that take
// seconds: the change comes 8 steps ahead at the earliest). It is stopped
// only once it has not left kSurplusGraceMs after the scheduler took it out,
// never while the job still needs it: before, the runner stopped it 30 s
// after the scale, and the job lost a member (a rollback, or its failure
// before its first checkpoint).
TEST_F(RunningJobTest, AWorkerScaledAwayIsNotStoppedWhileItStillComputes) {
  StartRunning(ElasticJob(3, 1, 4));
  controller_->SetComputingWorkers({0, 1, 2});
  controller_->SetDesiredWorkers(2);  // kubeps scale --workers 2 --at-step S
  const int64_t grace = JobController::kSurplusGraceMs;
  controller_->Reconcile(2000);
  controller_->Reconcile(2000 + 3 * grace);
  EXPECT_TRUE(cluster_.deleted.empty()) << "worker-2 computes every step before S";
  controller_->SetComputingWorkers({0, 1});  // the job passed S
  controller_->Reconcile(3000 + 3 * grace);
  EXPECT_TRUE(cluster_.deleted.empty()) << "it leaves on its own: the grace starts now";
  controller_->Reconcile(3000 + 4 * grace);
  EXPECT_EQ(cluster_.deleted, std::vector<std::string>{"worker-2"});
}

}  // namespace
}  // namespace kubeps::controller
