// What a failed replica's last words (its termination message: "Reason:
// message", or the tail of its log) add to the job's failure: the reason
// that makes a failure permanent, the words behind "exited with code 1".
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/termination_message.h"
#include "operator/controller/job_controller.h"
#include "tests/unit/operator/controller/fake_cluster.h"

namespace kubeps::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

LaunchBuilder Launch() {
  return [](const ReplicaName& name, const std::string&) {
    ReplicaLaunch launch;
    launch.name = name;
    launch.binary = name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
    return launch;
  };
}

TEST(FailureMessageTest, AMissingDataSetFailsTheJobAtOnceNamingThePath) {
  FakeCluster cluster;
  JobController controller(Job(), &cluster, Launch());
  cluster.address = "10.0.0.1:7000";
  controller.Reconcile(0);
  cluster.SetAll(ReplicaPhase::kRunning);
  cluster.Set(Worker(0), ReplicaPhase::kFailed, 1);
  cluster.replicas[Worker(0)].reason = kReasonDatasetNotFound;
  cluster.replicas[Worker(0)].message = "spec.dataset.path: /data/nope does not exist";
  cluster.created.clear();
  JobStatus status = controller.Reconcile(100);
  EXPECT_EQ(status.phase, JobPhase::kFailed);
  EXPECT_EQ(status.reason, kReasonDatasetNotFound);
  EXPECT_THAT(status.message, HasSubstr("/data/nope does not exist"));
  EXPECT_THAT(cluster.created, IsEmpty()) << "a rerun reads the same folder";
}

TEST(FailureMessageTest, AFailureTheRunPolicyEndsTheJobOnCarriesTheReplicasLastWords) {
  FakeCluster cluster;
  api::TrainingJob job = Job(api::RestartPolicy::kNever);
  JobController controller(job, &cluster, Launch());
  cluster.address = "10.0.0.1:7000";
  controller.Reconcile(0);
  cluster.SetAll(ReplicaPhase::kRunning);
  cluster.Set(Server(0), ReplicaPhase::kFailed, 1);
  cluster.replicas[Server(0)].reason = kReasonListenFailed;
  cluster.replicas[Server(0)].message = "cannot listen on 10.1.0.7:7000";
  JobStatus status = controller.Reconcile(10);
  EXPECT_EQ(status.reason, "RestartPolicyNever");
  EXPECT_THAT(status.message, HasSubstr("server-0 exited with code 1 and restartPolicy is Never "
                                        "(ListenFailed: cannot listen on 10.1.0.7:7000)"));
}

TEST(FailureMessageTest, ALogTailWithoutAReasonGivesItsLastLine) {
  std::string reason, message;
  ParseTerminationMessage(
      "loading data\nTraceback (most recent call last):\n  ...\n"
      "FileNotFoundError: /data/x\n\n",
      &reason, &message);
  EXPECT_EQ(reason, "");
  EXPECT_EQ(message, "FileNotFoundError: /data/x");
  ParseTerminationMessage("DatasetNotFound: spec.dataset.path: /x does not exist\n", &reason,
                          &message);
  EXPECT_EQ(reason, "DatasetNotFound");
  EXPECT_THAT(message, Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace kubeps::controller
