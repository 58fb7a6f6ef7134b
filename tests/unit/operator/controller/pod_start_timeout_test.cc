// What the job logic does with a replica that cannot start (an image that
// cannot be pulled, no node for it): the job says so in its status and, with
// runPolicy.podStartTimeoutSeconds, fails once that has passed.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/job_controller.h"
#include "tests/unit/operator/controller/fake_cluster.h"

namespace kubeps::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

LaunchBuilder Launch() {
  return [](const ReplicaName& name, const std::string&) {
    ReplicaLaunch launch;
    launch.name = name;
    launch.binary = name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
    return launch;
  };
}

class PodStartTest : public ::testing::Test {
 protected:
  // Every replica created at `kCreatedMs` and running but `stuck`, which
  // waits for what will not come.
  void StartWithStuck(const ReplicaName& stuck, const std::string& problem,
                      const std::string& message, int64_t timeout_s) {
    api::TrainingJob job = Job();
    job.spec.run_policy.pod_start_timeout_seconds = timeout_s;
    controller_ = std::make_unique<JobController>(job, &cluster_, Launch());
    cluster_.address = "10.0.0.1:7000";
    controller_->Reconcile(kCreatedMs);
    cluster_.SetAll(ReplicaPhase::kRunning);
    for (auto& [name, replica] : cluster_.replicas) {
      replica.created_ms = kCreatedMs;
      replica.instance = "mnist-" + name.ToString();
    }
    ReplicaStatus& replica = cluster_.replicas[stuck];
    replica.phase = ReplicaPhase::kPending;
    replica.start_problem = problem;
    replica.start_problem_message = message;
    cluster_.created.clear();
  }

  static constexpr int64_t kCreatedMs = 1000;
  FakeCluster cluster_;
  std::unique_ptr<JobController> controller_;
};

TEST_F(PodStartTest, AWorkerThatCannotStartSaysWhyInTheJobsStatus) {
  StartWithStuck(Worker(1), "ImagePullBackOff",
                 "container worker: Back-off pulling image \"registry.invalid/agent:1\"", 0);
  JobStatus status = controller_->Reconcile(kCreatedMs + 3'600'000);
  EXPECT_EQ(status.phase, JobPhase::kCreated);
  EXPECT_EQ(status.reason, "ImagePullBackOff");
  EXPECT_THAT(status.message, HasSubstr("worker-1 (pod mnist-worker-1) cannot start: "
                                        "ImagePullBackOff: container worker: Back-off pulling "
                                        "image \"registry.invalid/agent:1\""));
  EXPECT_THAT(status.message, HasSubstr("podStartTimeoutSeconds is unset"));
  EXPECT_THAT(cluster_.created, IsEmpty()) << "a pending replica is not re-created";
}

TEST_F(PodStartTest, AnImageThatCannotBePulledFailsTheJobOnceTheTimeoutHasPassed) {
  StartWithStuck(Worker(0), "ErrImagePull", "container worker: pull access denied", 30);
  JobStatus status = controller_->Reconcile(kCreatedMs + 29'999);
  EXPECT_EQ(status.phase, JobPhase::kCreated);
  EXPECT_THAT(status.message, HasSubstr("within runPolicy.podStartTimeoutSeconds (30 s)"));
  status = controller_->Reconcile(kCreatedMs + 30'000);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "ImagePullFailed");
  EXPECT_THAT(status.message, HasSubstr("worker-0 (pod mnist-worker-0) could not start within "
                                        "podStartTimeoutSeconds (30 s): ErrImagePull: container "
                                        "worker: pull access denied"));
  EXPECT_TRUE(cluster_.replicas.empty()) << "cleanPodPolicy All deletes every replica";
  EXPECT_EQ(controller_->Reconcile(kCreatedMs + 40'000).reason, "ImagePullFailed");
}

TEST_F(PodStartTest, AServerNoNodeCanTakeFailsTheJobAsUnschedulable) {
  StartWithStuck(Server(1), "Unschedulable",
                 "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
                 5);
  // The workers run: the job is Running, and says what the server does.
  JobStatus status = controller_->Reconcile(kCreatedMs + 100);
  EXPECT_EQ(status.phase, JobPhase::kRunning);
  EXPECT_THAT(status.message, HasSubstr("server-1 cannot start (Unschedulable: 0/1 nodes"));
  status = controller_->Reconcile(kCreatedMs + 5'000);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, "Unschedulable");
  EXPECT_THAT(status.message, HasSubstr("server-1 (pod mnist-server-1) could not start"));
}

TEST_F(PodStartTest, ARefusedContainerConfigurationFailsAsContainerConfigInvalid) {
  StartWithStuck(Worker(0), "CreateContainerConfigError",
                 "container worker: secret \"s3-credentials\" not found", 5);
  EXPECT_EQ(controller_->Reconcile(kCreatedMs + 5'000).reason, "ContainerConfigInvalid");
}

TEST_F(PodStartTest, AReplicaMerelyPendingIsNeverFailedByTheTimeout) {
  StartWithStuck(Worker(0), "", "", 5);
  JobStatus status = controller_->Reconcile(kCreatedMs + 3'600'000);
  EXPECT_EQ(status.phase, JobPhase::kCreated);
  EXPECT_EQ(status.reason, "JobCreated");
}

TEST_F(PodStartTest, WithoutATimeoutTheJobWaitsForever) {
  StartWithStuck(Worker(0), "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.", 0);
  EXPECT_EQ(controller_->Reconcile(kCreatedMs + 86'400'000).phase, JobPhase::kCreated);
}

}  // namespace
}  // namespace kubeps::controller
