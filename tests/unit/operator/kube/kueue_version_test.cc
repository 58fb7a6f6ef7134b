// Kueue 0.20 serves its API in kueue.x-k8s.io/v1beta2 only (0.15 to 0.19
// serve both). Before, the operator made Workloads in v1beta1 alone: on such
// a cluster every queued job waited for good, as if Kueue were not there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

const Resource kWorkloadsV1beta2{"kueue.x-k8s.io", "v1beta2", "workloads"};
const std::vector<std::string> kKueueKinds = {"workloads", "resourceflavors",
                                              "workloadpriorityclasses"};

class KueueV1beta2Test : public QueuedJobTest {
 protected:
  KueueV1beta2Test() {
    ServeKueue({{"v1beta2", kKueueKinds}});
    fake_.Create(
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
        {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodeLabels", {{"pool", "spot"}}}}}});
    const std::string name = WorkloadName({"mnist", kNamespace, Job()["metadata"]["uid"]});
    workload_ = CollectionPath(kWorkloadsV1beta2, kNamespace) + "/" + name;
  }
  // Discovery as the API server answers it: the group's versions, newest
  // first, and each version's resources (those of the CRDs serving it).
  void ServeKueue(const std::vector<std::pair<std::string, std::vector<std::string>>>& served) {
    json versions = json::array();
    for (const auto& [version, kinds] : served) {
      versions.push_back({{"groupVersion", "kueue.x-k8s.io/" + version}, {"version", version}});
      json resources = json::array();
      for (const std::string& kind : kinds) {
        resources.push_back({{"name", kind}, {"namespaced", kind == "workloads"}});
        resources.push_back({{"name", kind + "/status"}, {"namespaced", kind == "workloads"}});
      }
      fake_.ServeDiscovery("/apis/kueue.x-k8s.io/" + version,
                           {{"kind", "APIResourceList"},
                            {"groupVersion", "kueue.x-k8s.io/" + version},
                            {"resources", resources}});
    }
    fake_.ServeDiscovery("/apis/kueue.x-k8s.io", {{"kind", "APIGroup"},
                                                  {"apiVersion", "v1"},
                                                  {"name", "kueue.x-k8s.io"},
                                                  {"versions", versions},
                                                  {"preferredVersion", versions[0]}});
  }
};

TEST_F(KueueV1beta2Test, AQueuedJobRunsWhereKueueServesOnlyV1beta2) {
  fake_.Create("/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
               {{"metadata", {{"name", "batch"}}}, {"value", 10}});
  fake_.Modify(kJob, {{"metadata", {{"labels", {{kWorkloadPriorityClassLabel, "batch"}}}}}});
  Reconcile();
  json workload = fake_.Object(workload_);
  ASSERT_FALSE(workload.is_null()) << "no Workload made in v1beta2";
  EXPECT_EQ(workload["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(workload["spec"]["priorityClassRef"]["name"], "batch");
  EXPECT_EQ(workload["spec"]["priority"], 10);
  EXPECT_THAT(fake_.List(CollectionPath(kWorkloads, kNamespace)), IsEmpty());

  fake_.SetStatus(workload_, Admitted("spot"));
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  EXPECT_EQ(Pods()[0]["spec"]["nodeSelector"]["pool"], "spot")
      << "the flavor read in v1beta2: " << Pods()[0]["spec"].dump();

  json status = Job()["status"];
  status["phase"] = "Succeeded";
  status["completionTime"] = "2025-01-01T00:00:00Z";
  fake_.SetStatus(kJob, status);
  Reconcile();
  EXPECT_EQ(Condition(fake_.Object(workload_), "Finished")["status"], "True");
}

// Discovery did not answer the first time: the operator, still at v1beta1,
// finds no Workload there. That 404 is not taken for "none" (which would
// make one in a version not served, or mark a finished job's quota given
// back) until discovery has said which version is served.
TEST_F(KueueV1beta2Test, AWorkloadNotFoundBeforeDiscoveryAnsweredIsAskedForAgain) {
  fake_.FailNext("GET", "/apis/kueue.x-k8s.io", 1, 503);
  ReconcileResult result;
  EXPECT_FALSE(reconciler_->Reconcile(Job(), Pods(), &result).ok()) << "retried";
  Reconcile();
  EXPECT_FALSE(fake_.Object(workload_).is_null());
  EXPECT_THAT(fake_.RequestsTo("POST", CollectionPath(kWorkloads, kNamespace)), IsEmpty());
}

// Without Kueue the API server answers its group's discovery in plain text
// ("404 page not found"), no JSON at all: queued jobs wait, saying so.
TEST_F(QueuedJobTest, WithoutKueueTheGroupsPlainNotFoundIsNoKueue) {
  Reconcile();
  EXPECT_THAT(fake_.RequestsTo("GET", "/apis/kueue.x-k8s.io"), Not(IsEmpty()));
  EXPECT_EQ(Job()["status"]["phase"], "Suspended") << Job()["status"].dump();
  EXPECT_THAT(Job()["status"]["message"].get<std::string>(), HasSubstr("Kueue"));
  EXPECT_THAT(Pods(), IsEmpty());
}

// Each kind is its own CRD: an upgrade applied in part (Kueue's
// ResourceFlavor and WorkloadPriorityClass CRDs at v1beta2, its Workload
// CRD not yet) serves v1beta2 in the group but not for Workloads. Each kind
// is then asked for in the newest version that serves it.
TEST_F(KueueV1beta2Test, EachKindIsAskedForInTheNewestVersionThatServesIt) {
  ServeKueue(
      {{"v1beta2", {"resourceflavors", "workloadpriorityclasses"}}, {"v1beta1", kKueueKinds}});
  fake_.Create("/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
               {{"metadata", {{"name", "batch"}}}, {"value", 10}});
  fake_.Modify(kJob, {{"metadata", {{"labels", {{kWorkloadPriorityClassLabel, "batch"}}}}}});
  Reconcile();
  EXPECT_THAT(fake_.List(CollectionPath(kWorkloadsV1beta2, kNamespace)), IsEmpty());
  const std::vector<json> made = fake_.List(CollectionPath(kWorkloads, kNamespace));
  ASSERT_THAT(made, SizeIs(1)) << "no Workload made in v1beta1, the version serving Workloads";
  const json& workload = made[0];
  EXPECT_EQ(workload["apiVersion"], "kueue.x-k8s.io/v1beta1");
  EXPECT_EQ(workload["spec"]["priorityClassName"], "batch") << "v1beta1's shape";
  EXPECT_EQ(workload["spec"]["priority"], 10) << "the class read in v1beta2";

  fake_.SetStatus(CollectionPath(kWorkloads, kNamespace) + "/" +
                      workload["metadata"]["name"].get<std::string>(),
                  Admitted("spot"));
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  EXPECT_EQ(Pods()[0]["spec"]["nodeSelector"]["pool"], "spot")
      << "the flavor read in v1beta2: " << Pods()[0]["spec"].dump();
}

}  // namespace
}  // namespace kubeps::kube::queued_job_test
