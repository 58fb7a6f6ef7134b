// Pods that cannot start, as the Kubernetes backend reads them (a container
// waiting in ErrImagePull, a pod the scheduler cannot place) and as the
// reconciler reports them (an Event per pod and reason, the job's condition,
// the failure after runPolicy.podStartTimeoutSeconds).
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time_format.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/api_path.h"
#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube {
namespace {

using controller::ReplicaPhase;
using nlohmann::json;
using ::testing::HasSubstr;

const std::string kNamespace = "team-a";
const std::string kJobsPath = CollectionPath(kTrainingJobs, kNamespace);
const std::string kJob = kJobsPath + "/mnist";
const std::string kPodsPath = CollectionPath(kPods, kNamespace);
const std::string kEventsPath = CollectionPath(kEvents, kNamespace);

json Pod(const json& status) {
  return {{"metadata",
           {{"name", "mnist-worker-1"},
            {"creationTimestamp", "2025-03-01T10:00:00Z"},
            {"labels", {{kReplicaTypeLabel, "worker"}, {kReplicaIndexLabel, "1"}}}}},
          {"status", status}};
}

TEST(PodStartStatusTest, AContainerThatCannotPullItsImageIsAStartProblem) {
  controller::ReplicaStatus status = KubeCluster::StatusOf(
      Pod({{"phase", "Pending"},
           {"containerStatuses",
            {{{"name", "worker"},
              {"state",
               {{"waiting",
                 {{"reason", "ImagePullBackOff"},
                  {"message", "Back-off pulling image \"registry.invalid/agent:1\""}}}}}}}}}));
  EXPECT_EQ(status.phase, ReplicaPhase::kPending);
  EXPECT_EQ(status.start_problem, "ImagePullBackOff");
  EXPECT_EQ(status.start_problem_message,
            "container worker: Back-off pulling image \"registry.invalid/agent:1\"");
  EXPECT_EQ(status.instance, "mnist-worker-1");
  EXPECT_EQ(status.created_ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                   ParseTime("2025-03-01T10:00:00Z").time_since_epoch())
                                   .count());
}

TEST(PodStartStatusTest, ASidecarWhoseImageCannotBePulledIsOneToo) {
  controller::ReplicaStatus status = KubeCluster::StatusOf(
      Pod({{"phase", "Pending"},
           {"initContainerStatuses",
            {{{"name", "kubeps-agent"},
              {"state", {{"waiting", {{"reason", "ErrImagePull"}, {"message", "not found"}}}}}}}},
           {"containerStatuses",
            {{{"name", "trainer"}, {"state", {{"waiting", {{"reason", "PodInitializing"}}}}}}}}}));
  EXPECT_EQ(status.start_problem, "ErrImagePull");
  EXPECT_EQ(status.start_problem_message, "container kubeps-agent: not found");
}

TEST(PodStartStatusTest, APodNoNodeCanTakeIsUnschedulable) {
  controller::ReplicaStatus status = KubeCluster::StatusOf(
      Pod({{"phase", "Pending"},
           {"conditions",
            {{{"type", "PodScheduled"},
              {"status", "False"},
              {"reason", "Unschedulable"},
              {"message", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}}}}}));
  EXPECT_EQ(status.start_problem, "Unschedulable");
  EXPECT_EQ(status.start_problem_message,
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.");
}

// A big image takes minutes to pull: merely starting is no problem.
TEST(PodStartStatusTest, AContainerStillBeingCreatedIsNoProblem) {
  controller::ReplicaStatus status = KubeCluster::StatusOf(
      Pod({{"phase", "Pending"},
           {"containerStatuses",
            {{{"name", "worker"}, {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}}}}}}));
  EXPECT_EQ(status.start_problem, "");
}

class PodStartReconcileTest : public ::testing::Test {
 protected:
  PodStartReconcileTest() {
    EXPECT_TRUE(MetricsServer::Start("", -1, {}, &metrics_).ok());
    reconciler_ = std::make_unique<JobReconciler>(&fake_, JobObjectOptions{}, metrics_.get());
  }
  // The job's pods as the cache hands them over, created `age` ago.
  std::vector<json> PodsCreatedAgo(std::chrono::seconds age) {
    std::vector<json> pods = fake_.List(kPodsPath);
    for (json& pod : pods)
      pod["metadata"]["creationTimestamp"] = Rfc3339(std::chrono::system_clock::now() - age);
    return pods;
  }
  Status Reconcile(const std::vector<json>& pods) {
    ReconcileResult result;
    Status s = reconciler_->Reconcile(fake_.Object(kJob), pods, &result);
    requeue_after_ = result.requeue_after;
    return s;
  }
  std::vector<json> Events(const std::string& reason) {
    std::vector<json> events;
    for (const json& event : fake_.List(kEventsPath))
      if (event["reason"] == reason) events.push_back(event);
    return events;
  }

  fake::FakeKubeClient fake_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  std::chrono::milliseconds requeue_after_{0};
};

TEST_F(PodStartReconcileTest, APodThatCannotPullItsImageIsAnEventThenFailsTheJob) {
  json manifest = {
      {"apiVersion", "kubeps.io/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "mnist"}, {"namespace", kNamespace}}},
      {"spec",
       {{"dataset", {{"path", "/data"}}},
        {"runPolicy", {{"podStartTimeoutSeconds", 60}}},
        {"replicaSpecs", {{"ps", {{"replicas", 1}}}, {"worker", {{"replicas", 1}}}}}}}};
  fake_.Create(kJobsPath, manifest);
  ASSERT_TRUE(Reconcile(fake_.List(kPodsPath)).ok());
  ASSERT_FALSE(fake_
                   .SetStatus(kPodsPath + "/mnist-worker-0",
                              {{"phase", "Pending"},
                               {"containerStatuses",
                                {{{"name", "worker"},
                                  {"state",
                                   {{"waiting",
                                     {{"reason", "ErrImagePull"},
                                      {"message", "registry.invalid: no such host"}}}}}}}}})
                   .is_null());
  ASSERT_TRUE(Reconcile(PodsCreatedAgo(std::chrono::seconds(10))).ok());
  json status = fake_.Object(kJob)["status"];
  EXPECT_EQ(status["phase"], "Created") << status.dump();
  ASSERT_EQ(Events("ErrImagePull").size(), 1u);
  EXPECT_THAT(Events("ErrImagePull")[0]["message"].get<std::string>(),
              HasSubstr("pod mnist-worker-0 (worker-0) cannot start: container worker: "
                        "registry.invalid: no such host"));
  EXPECT_LE(requeue_after_, std::chrono::seconds(5)) << "looked at again before the timeout";
  ASSERT_TRUE(Reconcile(PodsCreatedAgo(std::chrono::seconds(20))).ok());
  EXPECT_EQ(Events("ErrImagePull").size(), 1u) << "one Event per pod and reason";

  ASSERT_TRUE(Reconcile(PodsCreatedAgo(std::chrono::seconds(61))).ok());
  status = fake_.Object(kJob)["status"];
  EXPECT_EQ(status["phase"], "Failed") << status.dump();
  bool found = false;
  for (const json& condition : status["conditions"]) {
    if (condition["type"] != "Failed") continue;
    found = true;
    EXPECT_EQ(condition["reason"], "ImagePullFailed");
    EXPECT_THAT(condition["message"].get<std::string>(),
                HasSubstr("worker-0 (pod mnist-worker-0) could not start within "
                          "podStartTimeoutSeconds (60 s): ErrImagePull"));
  }
  EXPECT_TRUE(found) << status.dump();
  EXPECT_EQ(Events("ImagePullFailed").size(), 1u);
}

}  // namespace
}  // namespace kubeps::kube
