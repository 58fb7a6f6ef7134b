// Where Kueue's admission puts a queued TrainingJob's pods
// (operator/kube/kueue_workload.h, PodSetPlacement): the admitted flavors'
// node labels and tolerations, then the admission checks' podSetUpdates,
// merged into each role's pod template as Kueue merges them, and a job whose
// admission conflicts with its template failing to start, as Kueue's own
// integrations fail it; and pods deleted and quota given back on eviction.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/kube/kueue_workload.h"
#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

PodSetPlacement Placement(json node_selector, json tolerations = json::array(),
                          json labels = json::object(), json annotations = json::object()) {
  return {std::move(node_selector), std::move(tolerations), std::move(labels),
          std::move(annotations)};
}

TEST(ApplyPodSetPlacementTest, AddsTheNodeLabelsTheTemplateDoesNotSet) {
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["nodeSelector"] = {
      {"zone", "mine"}};
  api::TrainingJob spec = Parsed(manifest);
  ApplyPodSetPlacement({{"worker", Placement({{"zone", "theirs"}, {"pool", "spot"}})},
                        {"server", Placement({{"pool", "on-demand"}})}},
                       &spec);
  const json& worker = spec.spec.worker.template_override["spec"]["nodeSelector"];
  EXPECT_EQ(worker["zone"], "mine");
  EXPECT_EQ(worker["pool"], "spot");
  EXPECT_EQ(spec.spec.ps.template_override["spec"]["nodeSelector"]["pool"], "on-demand");
  EXPECT_TRUE(spec.spec.scheduler.template_override.is_null());
}

TEST(ApplyPodSetPlacementTest, AddsTheTolerationsTheTemplateDoesNotHave) {
  const json gpu = {{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  const json spot = {{"key", "spot"}, {"operator", "Equal"}, {"value", "true"}};
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["tolerations"] = {gpu};
  api::TrainingJob spec = Parsed(manifest);
  ApplyPodSetPlacement({{"worker", Placement(json::object(), {gpu, spot})},
                        {"scheduler", Placement(json::object(), {spot})}},
                       &spec);
  EXPECT_EQ(spec.spec.worker.template_override["spec"]["tolerations"], json({gpu, spot}))
      << "each once, the template's first (Kueue's merge)";
  EXPECT_EQ(spec.spec.scheduler.template_override["spec"]["tolerations"], json({spot}));
  EXPECT_FALSE(spec.spec.scheduler.template_override["spec"].contains("nodeSelector"))
      << "no empty map written in";
  EXPECT_TRUE(spec.spec.ps.template_override.is_null());
}

TEST(ApplyPodSetPlacementTest, AddsLabelsAndAnnotationsToThePodsMetadata) {
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["template"]["metadata"] = {
      {"annotations", {{"team", "mine"}}}};
  api::TrainingJob spec = Parsed(manifest);
  ApplyPodSetPlacement({{"worker", Placement(json::object(), json::array(), {{"tier", "gpu"}},
                                             {{"team", "theirs"}, {"provisioning", "req-1"}})}},
                       &spec);
  const json& metadata = spec.spec.worker.template_override["metadata"];
  EXPECT_EQ(metadata["labels"], json({{"tier", "gpu"}}));
  EXPECT_EQ(metadata["annotations"], json({{"team", "mine"}, {"provisioning", "req-1"}}));
}

TEST(PodSetPlacementTest, AnEarlierValueStaysAndAnUpdateReadsOnlyStrings) {
  PodSetPlacement placement = Placement({{"pool", "spot"}});
  placement.Add(PlacementOfUpdate({{"name", "worker"},
                                   {"nodeSelector", {{"pool", "gpu"}, {"zone", "a"}}},
                                   {"labels", {{"n", 1}, {"tier", "gpu"}}},
                                   {"tolerations", {{{"key", "k"}, {"operator", "Exists"}}}}}));
  EXPECT_EQ(placement.node_selector, json({{"pool", "spot"}, {"zone", "a"}}));
  EXPECT_EQ(placement.labels, json({{"tier", "gpu"}}));
  EXPECT_THAT(placement.tolerations, SizeIs(1));
  EXPECT_TRUE(placement.annotations.empty());
}

TEST(PodSetPlacementTest, AConflictIsAKeySetToAnotherValueNotATolerationAdded) {
  const PodSetPlacement flavors =
      Placement({{"pool", "spot"}, {"zone", "a"}}, json::array(), {{"tier", "gpu"}});
  EXPECT_EQ(Conflict(flavors, Placement({{"zone", "a"}, {"disk", "ssd"}})), "")
      << "the same value twice, or a key of its own, is no conflict";
  EXPECT_EQ(Conflict(flavors, Placement(json::object(), {{{"key", "k"}, {"operator", "Exists"}}})),
            "");
  EXPECT_EQ(Conflict(flavors, Placement({{"pool", "gpu"}})),
            R"(nodeSelector "pool": "spot" against "gpu")");
  EXPECT_EQ(Conflict(flavors, Placement(json::object(), json::array(), {{"tier", "cpu"}})),
            R"(label "tier": "gpu" against "cpu")");
  EXPECT_EQ(Conflict(Placement(json::object(), json::array(), json::object(), {{"a", "1"}}),
                     Placement(json::object(), json::array(), json::object(), {{"a", "2"}})),
            R"(annotation "a": "1" against "2")");
}

TEST(ApplyPodSetPlacementTest, SaysWhereTheTemplateConflictsAndKeepsItsValue) {
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["nodeSelector"] = {
      {"gpu", "a100"}};
  api::TrainingJob spec = Parsed(manifest);
  const std::string conflict =
      ApplyPodSetPlacement({{"server", Placement({{"gpu", "h100"}})},
                            {"worker", Placement({{"gpu", "h100"}, {"pool", "spot"}})}},
                           &spec);
  EXPECT_EQ(conflict, R"(worker: nodeSelector "gpu": "a100" in its pod template against "h100")");
  EXPECT_EQ(spec.spec.worker.template_override["spec"]["nodeSelector"],
            json({{"gpu", "a100"}, {"pool", "spot"}}));
  EXPECT_EQ(spec.spec.ps.template_override["spec"]["nodeSelector"], json({{"gpu", "h100"}}));
}

TEST_F(QueuedJobTest, RunsOnTheAdmittedFlavorsNodesAndStopsWhenEvicted) {
  Reconcile();
  const json tolerate_spot = {{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  fake_.Create("/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
               {{"metadata", {{"name", "spot"}}},
                {"spec",
                 {{"nodeLabels", {{"pool", "spot"}}},
                  {"nodeTaints", {{{"key", "spot"}, {"value", "true"}, {"effect", "NoSchedule"}}}},
                  {"tolerations", {tolerate_spot}}}}});
  fake_.SetStatus(workload_, Admitted("spot"));
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  for (const json& pod : Pods()) {
    EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "spot");
    EXPECT_EQ(pod["spec"]["tolerations"], json::array({tolerate_spot}))
        << "the flavor's tainted nodes take the pods";
  }
  EXPECT_NE(Job()["status"]["phase"], "Suspended");

  json evicted = WithCondition(fake_.Object(workload_), "Evicted", true, "Preempted",
                               "Preempted to accommodate a higher priority Workload", "t1");
  fake_.SetStatus(workload_, evicted["status"]);
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_EQ(Job()["status"]["phase"], "Suspended");
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("Preempted"));
  EXPECT_THAT(EventReasons(), Contains("Evicted"));
  EXPECT_TRUE(fake_.Object(workload_)["status"].contains("admission"))
      << "the quota is given back only once the job's pods are gone, not while they terminate";
  Reconcile();  // the cache shows no pod now
  const json released = fake_.Object(workload_);
  EXPECT_FALSE(released["status"].contains("admission")) << "the quota is given back";
  EXPECT_EQ(Condition(released, "QuotaReserved")["status"], "False");

  fake_.SetStatus(workload_, Admitted("spot"));  // admitted again: Kueue clears Evicted
  Reconcile();
  EXPECT_THAT(Pods(), SizeIs(4));
}

TEST_F(QueuedJobTest, AnAdmissionChecksPodSetUpdatesGoIntoThePods) {
  // As a ProvisioningRequest check writes them once the cluster autoscaler
  // has made the nodes: the pods must say they consume that request.
  Reconcile();
  json status = Admitted("default");
  status["admissionChecks"] = {
      {{"name", "dws-prov"},
       {"state", "Ready"},
       {"message", "Provisioned"},
       {"lastTransitionTime", "2025-01-01T00:00:00Z"},
       {"podSetUpdates",
        {{{"name", "worker"},
          {"annotations",
           {{"cluster-autoscaler.kubernetes.io/consume-provisioning-request", "req-1"},
            {"cluster-autoscaler.kubernetes.io/provisioning-class-name",
             "queued-provisioning.gke.io"}}},
          {"nodeSelector", {{"cloud.google.com/gke-nodepool", "gpu-pool"}}}}}}}};
  fake_.SetStatus(workload_, status);
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  int workers = 0;
  for (const json& pod : Pods()) {
    const bool worker = pod["metadata"]["labels"][kReplicaTypeLabel] == "worker";
    workers += worker;
    const json annotations = pod["metadata"].value("annotations", json::object());
    EXPECT_EQ(annotations.contains("cluster-autoscaler.kubernetes.io/consume-provisioning-request"),
              worker);
    EXPECT_EQ(pod["spec"]
                  .value("nodeSelector", json::object())
                  .value("cloud.google.com/gke-nodepool", ""),
              worker ? "gpu-pool" : "");
  }
  EXPECT_EQ(workers, 2);
}

// Admitted with a topology assignment, a role's pods wait behind Kueue's
// scheduling gate until Kueue's ungater gives each its domain's node
// labels; Kueue finds them by their pod set label and Workload annotation,
// which every admitted pod carries, as the pods of Kueue's own integrations.
TEST_F(QueuedJobTest, APodSetAssignedATopologyWaitsForKueueToPlaceEachPod) {
  Reconcile();
  json status = Admitted("default");
  status["admission"]["podSetAssignments"][2]["topologyAssignment"] = {
      {"levels", {"cloud.google.com/gce-topology-block"}},
      {"domains", {{{"values", {"block-a"}}, {"count", 2}}}}};
  fake_.SetStatus(workload_, status);
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  const std::string workload_name = fake_.Object(workload_)["metadata"]["name"];
  for (const json& pod : Pods()) {
    const std::string role = pod["metadata"]["labels"][kReplicaTypeLabel];
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], role) << "the pod set's name";
    EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"], workload_name);
    const bool placed_by_kueue = role == "worker";
    EXPECT_EQ(
        pod["spec"].value("schedulingGates", json::array()),
        placed_by_kueue ? json::array({{{"name", "kueue.x-k8s.io/topology"}}}) : json::array())
        << pod["metadata"]["name"];
    EXPECT_EQ(pod["metadata"]["labels"].value("kueue.x-k8s.io/tas", ""),
              placed_by_kueue ? "true" : "");
  }
}

// An admission check's update that sets a node label the template sets to
// another value: Kueue's own integrations do not start such a job (the
// Workload Finished, reason FailedToStart, its quota released), and neither
// does the operator: its pods would land where the admission did not put
// them, or nowhere.
TEST_F(QueuedJobTest, AnAdmissionThatConflictsWithTheTemplateFailsToStart) {
  fake_.Modify(
      kJob,
      {{"spec",
        {{"replicaSpecs",
          {{"worker", {{"template", {{"spec", {{"nodeSelector", {{"gpu", "a100"}}}}}}}}}}}}}});
  Reconcile();
  json status = Admitted("default");
  status["admissionChecks"] = {
      {{"name", "prov"},
       {"state", "Ready"},
       {"message", "Provisioned"},
       {"lastTransitionTime", "2025-01-01T00:00:00Z"},
       {"podSetUpdates", {{{"name", "worker"}, {"nodeSelector", {{"gpu", "h100"}}}}}}}};
  fake_.SetStatus(workload_, status);
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty()) << "no pod starts against its admission";
  EXPECT_EQ(Job()["status"]["phase"], "Failed");
  const std::string message = Job()["status"]["message"];
  EXPECT_THAT(message, HasSubstr(R"(worker: nodeSelector "gpu": "a100" in its pod template)"));
  EXPECT_THAT(message, HasSubstr("h100"));
  Reconcile();  // the finished job gives its quota back
  const json finished = Condition(fake_.Object(workload_), "Finished");
  ASSERT_FALSE(finished.is_null());
  EXPECT_EQ(finished["status"], "True");
  EXPECT_EQ(finished["reason"], "FailedToStart") << "as Kueue's jobframework marks it";
}

TEST_F(QueuedJobTest, AnUpdateThatConflictsWithTheFlavorsFailsToStart) {
  Reconcile();
  fake_.Create("/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
               {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodeLabels", {{"pool", "spot"}}}}}});
  json status = Admitted("spot");
  status["admissionChecks"] = {
      {{"name", "prov"},
       {"state", "Ready"},
       {"lastTransitionTime", "2025-01-01T00:00:00Z"},
       {"podSetUpdates", {{{"name", "server"}, {"nodeSelector", {{"pool", "reserved"}}}}}}}};
  fake_.SetStatus(workload_, status);
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_EQ(Job()["status"]["phase"], "Failed");
  EXPECT_THAT(
      Job()["status"]["message"].get<std::string>(),
      HasSubstr(R"(server: admission check prov: nodeSelector "pool": "spot" against "reserved")"));
}

// A flavor read that fails for now (the API server overloaded) must not
// start pods without the flavor's node labels and tolerations: they would
// land on nodes the quota is not for, or wait for ever off a tainted pool.
// Read once for the admission, as Kueue reads it when it starts a job, it
// holds up nothing of the running job.
TEST_F(QueuedJobTest, AFlavorIsReadOnceForItsAdmissionAndHoldsOnlyTheStartBack) {
  Reconcile();
  const std::string flavor = "/apis/kueue.x-k8s.io/v1beta1/resourceflavors/spot";
  fake_.Create("/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
               {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodeLabels", {{"pool", "spot"}}}}}});
  fake_.SetStatus(workload_, Admitted("spot"));
  fake_.FailNext("GET", flavor, 1, 503);
  ReconcileResult result;
  EXPECT_FALSE(reconciler_->Reconcile(Job(), Pods(), &result).ok()) << "tried again later";
  EXPECT_THAT(Pods(), IsEmpty());
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  for (const json& pod : Pods()) EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "spot");
  fake_.ClearRequests();
  fake_.FailNext("GET", flavor, 5, 503);
  Reconcile();
  EXPECT_THAT(fake_.RequestsTo("GET", flavor), IsEmpty()) << "a running job reads no flavor";
  fake_.ClearFailures();
}

// A flavor deleted after it was assigned (its ClusterQueue goes inactive,
// but this admission stands): Kueue's integrations start nothing without
// it, trying again until it is there, and so does the operator.
TEST_F(QueuedJobTest, AFlavorNotThereHoldsTheStartBackUntilItIs) {
  Reconcile();
  fake_.SetStatus(workload_, Admitted("spot"));
  ReconcileResult result;
  const Status status = reconciler_->Reconcile(Job(), Pods(), &result);
  EXPECT_FALSE(status.ok()) << "tried again later";
  EXPECT_THAT(status.message(), HasSubstr("ResourceFlavor spot"));
  EXPECT_THAT(Pods(), IsEmpty());
  fake_.Create("/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
               {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodeLabels", {{"pool", "spot"}}}}}});
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(4));
  for (const json& pod : Pods()) EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "spot");
}

}  // namespace
}  // namespace kubeps::kube::queued_job_test
