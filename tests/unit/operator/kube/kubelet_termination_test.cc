// Pods the kubelet itself ends, with no deletion: they stay Failed with the
// condition DisruptionTarget (reason TerminationByKubelet). A graceful node
// shutdown (pod reason "Terminated") or the kubelet preempting a pod for a
// critical one is the node's doing, like a drain's eviction: the replica is
// made again without counting as a restart, under any restartPolicy. A
// node-pressure eviction (pod reason "Evicted") picks the pods using most
// over their requests, so the pod is often its own cause: it counts as a
// failure, bounded by backoffLimit, and the kubelet's words say why. A pod
// the kubelet rejected before it ran is made again under any restartPolicy,
// counted, unless its node refused it as it shut down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time_format.h"
#include "tests/unit/operator/kube/job_reconciler_fixture.h"

namespace kubeps::kube::reconciler_test {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

class KubeletTerminationTest : public JobReconcilerTest {
 protected:
  // A running job (restartPolicy Never) whose worker-1 the kubelet ended:
  // `pod_reason` and `message` as the kubelet writes them, the condition's
  // reason `by`.
  void KubeletEndsWorker1(const std::string& pod_reason, const std::string& message,
                          const std::string& by = "TerminationByKubelet") {
    json manifest = JobManifest();
    manifest["spec"]["runPolicy"] = {{"restartPolicy", "Never"}};
    CreateJob(manifest);
    ASSERT_TRUE(Reconcile().ok());
    SetAllPods("Running");
    ASSERT_TRUE(Reconcile().ok());
    json status = {{"phase", "Failed"},
                   {"reason", pod_reason},
                   {"message", message},
                   {"conditions",
                    {{{"type", "DisruptionTarget"},
                      {"status", "True"},
                      {"reason", by},
                      {"message", message}}}},
                   {"containerStatuses",
                    {{{"name", "worker"},
                      {"state", {{"terminated", {{"exitCode", 143}, {"reason", "Error"}}}}}}}}};
    ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-1", status).is_null());
    ASSERT_TRUE(Reconcile().ok());
  }
  // A reconcile that sees pod `name` made `age` ago.
  Status ReconcileWithPodAged(const std::string& name, std::chrono::seconds age) {
    std::vector<json> pods = fake_.List(kPodsPath);
    for (auto& pod : pods) {
      if (pod["metadata"]["name"] == name)
        pod["metadata"]["creationTimestamp"] = Rfc3339(std::chrono::system_clock::now() - age);
    }
    return ReconcileWith(fake_.Object(kJob), pods);
  }
  std::string EventMessage(const std::string& reason) {
    for (const auto& event : fake_.List(kEventsPath)) {
      if (event["reason"] == reason) return event["message"];
    }
    return "";
  }
};

TEST_F(KubeletTerminationTest, AWorkerEndedByANodeShutdownIsMadeAgainWithoutCountingARestart) {
  ASSERT_NO_FATAL_FAILURE(KubeletEndsWorker1(
      "Terminated", "Pod was terminated in response to imminent node shutdown."));
  json status = StatusOfJob();
  EXPECT_NE(status["phase"], "Failed") << status.dump();
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1").is_null()) << "the ended pod stays";
  json replacement = fake_.Object(kPodsPath + "/mnist-worker-1-r1");
  ASSERT_FALSE(replacement.is_null()) << "worker-1 was not made again";
  EXPECT_EQ(replacement["metadata"]["annotations"][kRestartsAnnotation], "0")
      << "a disruption is not a restart of the replica";
  EXPECT_EQ(status["replicaStatuses"]["worker"]["restarts"], 0) << status.dump();
  EXPECT_THAT(EventMessage("PodEvicted"),
              HasSubstr("pod mnist-worker-1 (worker-1) was ended by its node "
                        "(TerminationByKubelet: Pod was terminated in response to imminent "
                        "node shutdown.)"));

  // The replacement runs, and the job with it, as after a drain.
  SetPod("mnist-worker-1-r1", "Running");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["phase"], "Running") << StatusOfJob().dump();
}

TEST_F(KubeletTerminationTest, ANodePressureEvictionIsAFailureThatSaysWhy) {
  const std::string pressure =
      "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. "
      "Container worker was using 6Gi, request is 1Gi, has larger consumption of memory.";
  ASSERT_NO_FATAL_FAILURE(KubeletEndsWorker1("Evicted", pressure));
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Failed") << "restartPolicy Never: " << status.dump();
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("(Evicted: " + pressure + ")"));
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null());
  EXPECT_THAT(EventMessage("PodEvicted"), HasSubstr("counts as a failure"));
}

// An eviction marks the pod, then deletes it: a pod Failed in the moment
// between, not deleted yet, failed by itself; its deletion is said once
// it comes.
TEST_F(KubeletTerminationTest, APodThatFailedAsItWasAboutToBeEvictedFailedByItself) {
  ASSERT_NO_FATAL_FAILURE(
      KubeletEndsWorker1("", "Eviction API: evicting", "EvictionByEvictionAPI"));
  EXPECT_EQ(StatusOfJob()["phase"], "Failed") << "restartPolicy Never";
  EXPECT_EQ(EventMessage("PodEvicted"), "");
}

// The kubelet refused to admit the pod (a GPU its device plugin could not
// allocate, a node that filled up behind the scheduler's back): it never
// ran, so even restartPolicy Never makes it again; each try counts against
// backoffLimit, which bounds a node that rejects it every time.
TEST_F(KubeletTerminationTest, APodTheKubeletRejectedIsMadeAgainUnderNeverUntilTheBackoffLimit) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"restartPolicy", "Never"}, {"backoffLimit", 1}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  const std::string why =
      "Pod was rejected: Allocate failed due to requested number of devices unavailable for "
      "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected";
  const json rejected = {
      {"phase", "Failed"}, {"reason", "UnexpectedAdmissionError"}, {"message", why}};
  ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-1", rejected).is_null());
  // A node that refuses a pod often refuses the next at once too (its
  // device plugin not registered yet): made again 10 s after the last.
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null()) << "made again at once";
  EXPECT_NE(StatusOfJob()["phase"], "Failed");
  ASSERT_TRUE(ReconcileWithPodAged("mnist-worker-1", std::chrono::seconds(11)).ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Restarting") << status.dump();
  EXPECT_THAT(status["message"].get<std::string>(),
              HasSubstr("worker-1 was rejected by its node before it ran"));
  EXPECT_THAT(status["message"].get<std::string>(),
              HasSubstr("(UnexpectedAdmissionError: " + why + ")"));
  ASSERT_FALSE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null());
  EXPECT_EQ(status["replicaStatuses"]["worker"]["restarts"], 1);

  // Rejected again: backoffLimit 1 is spent.
  ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-1-r1", rejected).is_null());
  ASSERT_TRUE(Reconcile().ok());
  status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Failed") << status.dump();
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("backoffLimit 1 reached"));
}

// A node that shuts down refuses every pod bound to it meanwhile (the
// scheduler may bind one before the node's not-ready taint lands): the pod
// never ran and the node, not the program, is why. Made again without
// counting, as a pod the shutdown ended, even with no restart to spare; but
// 10 s after the last, as a pod bound to the node by its template would be
// refused again at once until the node is back.
TEST_F(KubeletTerminationTest, APodRefusedByANodeShuttingDownIsMadeAgainWithoutCounting) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"restartPolicy", "Never"}, {"backoffLimit", 0}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  const std::string why = "Pod was rejected: Pod was rejected as the node is shutting down.";
  ASSERT_FALSE(fake_
                   .SetStatus(kPodsPath + "/mnist-worker-1",
                              {{"phase", "Failed"}, {"reason", "NodeShutdown"}, {"message", why}})
                   .is_null());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_NE(StatusOfJob()["phase"], "Failed") << StatusOfJob().dump();
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null()) << "made again at once";
  ASSERT_TRUE(ReconcileWithPodAged("mnist-worker-1", std::chrono::seconds(11)).ok());
  json status = StatusOfJob();
  EXPECT_NE(status["phase"], "Failed") << status.dump();
  json replacement = fake_.Object(kPodsPath + "/mnist-worker-1-r1");
  ASSERT_FALSE(replacement.is_null()) << "worker-1 was not made again";
  EXPECT_EQ(replacement["metadata"]["annotations"][kRestartsAnnotation], "0");
  EXPECT_EQ(status["replicaStatuses"]["worker"]["restarts"], 0) << status.dump();
  EXPECT_THAT(EventMessage("PodRefused"),
              HasSubstr("pod mnist-worker-1 (worker-1) was refused by its node (NodeShutdown: " +
                        why + "); it is made again, not counted as a restart"));

  // Refused again: each refusal in a row doubles the wait (20 s now).
  ASSERT_FALSE(fake_
                   .SetStatus(kPodsPath + "/mnist-worker-1-r1",
                              {{"phase", "Failed"}, {"reason", "NodeShutdown"}, {"message", why}})
                   .is_null());
  ASSERT_TRUE(ReconcileWithPodAged("mnist-worker-1-r1", std::chrono::seconds(11)).ok());
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r2").is_null()) << "made again at 11 s";
  ASSERT_TRUE(ReconcileWithPodAged("mnist-worker-1-r1", std::chrono::seconds(21)).ok());
  json third = fake_.Object(kPodsPath + "/mnist-worker-1-r2");
  ASSERT_FALSE(third.is_null()) << "worker-1 was not made again after 20 s";
  EXPECT_EQ(third["metadata"]["annotations"][kNodeRefusalsAnnotation], "2");
  EXPECT_EQ(StatusOfJob()["replicaStatuses"]["worker"]["restarts"], 0);
}

// A container that ran and failed is the program's failure, whatever the
// pod's reason: Never still means never.
TEST_F(KubeletTerminationTest, APodWhoseContainerRanIsNotTakenForARejection) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"restartPolicy", "Never"}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  const json failed = {
      {"phase", "Failed"},
      {"reason", "DeadlineExceeded"},
      {"message", "Pod was active on the node longer than the specified deadline"},
      {"containerStatuses",
       {{{"name", "worker"},
         {"state",
          {{"terminated", {{"exitCode", 137}, {"startedAt", "2026-01-01T00:00:00Z"}}}}}}}}};
  ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-1", failed).is_null());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["phase"], "Failed") << StatusOfJob().dump();
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null());
}

}  // namespace
}  // namespace kubeps::kube::reconciler_test
