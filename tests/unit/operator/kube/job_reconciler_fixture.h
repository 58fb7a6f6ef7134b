// The fixture of the reconciler's tests (job_reconciler_test.cc,
// job_reconciler_tls_test.cc): one TrainingJob "mnist" in namespace team-a
// (1 ps, 2 workers) on the fake API server, and one reconcile at a time.
#ifndef KUBEPS_TESTS_UNIT_OPERATOR_KUBE_JOB_RECONCILER_FIXTURE_H_
#define KUBEPS_TESTS_UNIT_OPERATOR_KUBE_JOB_RECONCILER_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "operator/kube/job_reconciler.h"
#include "operator/kubeclient/api_path.h"
#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube::reconciler_test {

using fake::FakeKubeClient;
using nlohmann::json;

inline const std::string kNamespace = "team-a";
inline const std::string kJobsPath = CollectionPath(kTrainingJobs, kNamespace);
inline const std::string kJob = kJobsPath + "/mnist";
inline const std::string kPodsPath = CollectionPath(kPods, kNamespace);
inline const std::string kServicesPath = CollectionPath(kServices, kNamespace);
inline const std::string kSecretsPath = CollectionPath(kSecrets, kNamespace);
inline const std::string kEventsPath = CollectionPath(kEvents, kNamespace);
// One scheduler, one server, two workers.
inline const std::vector<std::string> kPodNames = {"mnist-scheduler-0", "mnist-server-0",
                                                   "mnist-worker-0", "mnist-worker-1"};

inline json JobManifest() {
  return {{"apiVersion", "kubeps.io/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "mnist"}, {"namespace", kNamespace}}},
          {"spec",
           {{"dataset", {{"path", "/data"}}},
            {"replicaSpecs", {{"ps", {{"replicas", 1}}}, {"worker", {{"replicas", 2}}}}}}}};
}

inline std::vector<std::string> Names(const std::vector<json>& objects) {
  std::vector<std::string> names;
  for (const auto& object : objects) names.push_back(object["metadata"]["name"]);
  return names;
}

class JobReconcilerTest : public ::testing::Test {
 protected:
  JobReconcilerTest() {
    EXPECT_TRUE(MetricsServer::Start("", -1, {}, &metrics_).ok());
    reconciler_ = std::make_unique<JobReconciler>(&fake_, JobObjectOptions{}, metrics_.get());
  }

  json CreateJob(json manifest = JobManifest()) {
    json job = fake_.Create(kJobsPath, std::move(manifest));
    uid_ = job["metadata"]["uid"];
    return job;
  }
  // One reconcile of the job as the server has it now, with its pods as the
  // operator's cache would hand them over.
  Status Reconcile() { return ReconcileWith(fake_.Object(kJob), fake_.List(kPodsPath)); }
  Status ReconcileWith(const json& job, const std::vector<json>& pods) {
    result_ = ReconcileResult();
    return reconciler_->Reconcile(job, pods, &result_);
  }
  json StatusOfJob() { return fake_.Object(kJob)["status"]; }
  // The phase the kubelet reports; `exit_code` and the termination message
  // (`last_words`, "Reason: message") for a finished container.
  void SetPod(const std::string& name, const std::string& phase, int exit_code = 0,
              const std::string& last_words = "") {
    json status = {{"phase", phase}};
    if (phase == "Succeeded" || phase == "Failed") {
      json terminated = {{"exitCode", exit_code}};
      if (!last_words.empty()) terminated["message"] = last_words;
      status["containerStatuses"] = {{{"name", "c"}, {"state", {{"terminated", terminated}}}}};
    }
    ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/" + name, status).is_null()) << name;
  }
  void SetAllPods(const std::string& phase) {
    for (const auto& name : Names(fake_.List(kPodsPath))) SetPod(name, phase);
  }
  std::vector<std::string> EventReasons() {
    std::vector<std::string> reasons;
    for (const auto& event : fake_.List(kEventsPath)) reasons.push_back(event["reason"]);
    return reasons;
  }
  double Metric(const std::string& name) {
    for (const auto& family : metrics_->registry().Collect()) {
      if (family.name == name && !family.metric.empty())
        return family.metric[0].counter.value + family.metric[0].histogram.sample_count;
    }
    return 0;
  }

  // A job with cleanPodPolicy All whose pods have all succeeded; returns it
  // as read then, still unfinished, before the reconcile that ends it.
  json RunCleanAllJobToItsEnd() {
    json manifest = JobManifest();
    manifest["spec"]["runPolicy"] = {{"cleanPodPolicy", "All"}};
    CreateJob(manifest);
    EXPECT_TRUE(Reconcile().ok());
    SetAllPods("Succeeded");
    return fake_.Object(kJob);
  }

  FakeKubeClient fake_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  ReconcileResult result_;
  std::string uid_;
};

}  // namespace kubeps::kube::reconciler_test

#endif  // KUBEPS_TESTS_UNIT_OPERATOR_KUBE_JOB_RECONCILER_FIXTURE_H_
