// What the Kueue tests share (kueue_workload_test.cc, kueue_placement_test.cc):
// a queued TrainingJob "mnist" in namespace team-a (1 ps, 2 workers, in
// queue team-queue), the status Kueue writes when it admits its Workload,
// and the fixture that reconciles it against the fake API server.
#ifndef KUBEPS_TESTS_UNIT_OPERATOR_KUBE_QUEUED_JOB_FIXTURE_H_
#define KUBEPS_TESTS_UNIT_OPERATOR_KUBE_QUEUED_JOB_FIXTURE_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "operator/kube/job_reconciler.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"
#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube::queued_job_test {

using nlohmann::json;

// The fake API server answers no discovery of Kueue's group: the operator
// keeps to v1beta1, which Kueue served before 0.15.
inline const Resource kWorkloads{"kueue.x-k8s.io", "v1beta1", "workloads"};
inline const std::string kNamespace = "team-a";
inline const JobIdentity kId{"mnist", kNamespace, "uid-1"};

inline json Manifest() {
  return json::parse(R"({
    "apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "mnist", "namespace": "team-a",
                 "labels": {"kueue.x-k8s.io/queue-name": "team-queue"}},
    "spec": {"dataset": {"path": "/data"},
             "replicaSpecs": {"ps": {"replicas": 1},
                              "worker": {"replicas": 2, "template": {"spec": {"containers": [
                                {"name": "worker",
                                 "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}}}}
  })");
}

inline api::TrainingJob Parsed(const json& manifest = Manifest()) {
  auto parsed = api::ParseTrainingJob(manifest.dump());
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return *parsed.job;
}

inline json Condition(const json& workload, const std::string& type) {
  for (const json& c : workload["status"].value("conditions", json::array()))
    if (c["type"] == type) return c;
  return nullptr;
}

// The status Kueue writes when it admits a Workload of three pod sets.
inline json Admitted(const std::string& flavor) {
  json assignments = json::array();
  for (const char* pod_set : {"scheduler", "server", "worker"}) {
    assignments.push_back({{"name", pod_set}, {"flavors", {{"cpu", flavor}, {"memory", flavor}}}});
  }
  const json ok = {{"status", "True"}, {"lastTransitionTime", "2025-01-01T00:00:00Z"}};
  json reserved = ok, admitted = ok;
  reserved.update({{"type", "QuotaReserved"}, {"reason", "QuotaReserved"}, {"message", "ok"}});
  admitted.update({{"type", "Admitted"}, {"reason", "Admitted"}, {"message", "ok"}});
  return {{"admission", {{"clusterQueue", "cq"}, {"podSetAssignments", assignments}}},
          {"conditions", {reserved, admitted}}};
}

class QueuedJobTest : public ::testing::Test {
 protected:
  QueuedJobTest() {
    EXPECT_TRUE(MetricsServer::Start("", -1, {}, &metrics_).ok());
    reconciler_ = std::make_unique<JobReconciler>(&fake_, JobObjectOptions{}, metrics_.get());
    // The flavor of nodes without labels or taints most ClusterQueues start with.
    fake_.Create("/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
                 {{"metadata", {{"name", "default"}}}, {"spec", json::object()}});
    json job = fake_.Create(kJobs, Manifest());
    workload_ = CollectionPath(kWorkloads, kNamespace) + "/" +
                WorkloadName({"mnist", kNamespace, job["metadata"]["uid"]});
  }
  void Reconcile() {
    ReconcileResult result;
    ASSERT_TRUE(reconciler_->Reconcile(fake_.Object(kJob), fake_.List(kPods_), &result).ok());
    requeue_ = result.requeue_after;
  }
  json Job() { return fake_.Object(kJob); }
  // The Workload made, Kueue admits it, and the job's 4 pods are made.
  void RunAdmitted() {
    Reconcile();
    fake_.SetStatus(workload_, Admitted("default"));
    Reconcile();
    ASSERT_THAT(Pods(), ::testing::SizeIs(4));
  }
  void MakeElastic() {
    fake_.Modify(
        kJob, {{"spec",
                {{"replicaSpecs",
                  {{"worker", {{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 4}}}}}}}}}});
  }
  void ScaleWorkers(int replicas) {
    fake_.Modify(kJob, {{"spec", {{"replicaSpecs", {{"worker", {{"replicas", replicas}}}}}}}});
  }
  void Suspend(bool suspend) {
    fake_.Modify(kJob, {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}});
  }
  std::vector<json> Pods() { return fake_.List(kPods_); }
  std::vector<std::string> EventReasons() {
    std::vector<std::string> reasons;
    for (const json& e : fake_.List(CollectionPath(kEvents, kNamespace)))
      reasons.push_back(e["reason"]);
    return reasons;
  }

  const std::string kJobs = CollectionPath(kTrainingJobs, kNamespace);
  const std::string kJob = kJobs + "/mnist";
  const std::string kPods_ = CollectionPath(kPods, kNamespace);
  fake::FakeKubeClient fake_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  std::string workload_;
  std::chrono::milliseconds requeue_{0};
};

}  // namespace kubeps::kube::queued_job_test

#endif  // KUBEPS_TESTS_UNIT_OPERATOR_KUBE_QUEUED_JOB_FIXTURE_H_
