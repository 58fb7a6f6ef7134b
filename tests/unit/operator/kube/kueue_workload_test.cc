// A queued TrainingJob's Kueue Workload (operator/kube/kueue_workload.h):
// its name, its pod sets, how Kueue's admission and eviction are read; and
// the reconcile of a queued job against the fake API server: no pods until
// Kueue admits the Workload, pods deleted and quota given back on eviction,
// the Workload made again when the job changes, Finished at the end. Where
// an admission puts the pods: kueue_placement_test.cc.
#include "operator/kube/kueue_workload.h"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

const std::string kV1beta1 = "kueue.x-k8s.io/v1beta1", kV1beta2 = "kueue.x-k8s.io/v1beta2";

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

TEST(WorkloadNameTest, IsKueueStyleAndFitsALabel) {
  const std::string name = WorkloadName(kId);
  EXPECT_THAT(name, ::testing::MatchesRegex("trainingjob-mnist-[0-9a-f]{5}"));
  EXPECT_EQ(WorkloadName(kId), name) << "stable";
  EXPECT_NE(WorkloadName({"mnist", kNamespace, "uid-2"}), name) << "a new job, a new Workload";
  const std::string long_name = WorkloadName({std::string(63, 'a'), kNamespace, "u"});
  EXPECT_EQ(long_name.size(), 63u);
}

TEST(BuildWorkloadTest, OnePodSetPerRoleWithTheRequestsOfItsPods) {
  const json workload =
      BuildWorkload(kId, Parsed(), "team-queue", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_EQ(workload["apiVersion"], "kueue.x-k8s.io/v1beta1");
  EXPECT_EQ(workload["kind"], "Workload");
  EXPECT_EQ(workload["metadata"]["name"], WorkloadName(kId));
  EXPECT_EQ(workload["metadata"]["namespace"], kNamespace);
  const json owner = workload["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["uid"], "uid-1");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
  EXPECT_EQ(workload["spec"]["queueName"], "team-queue");
  EXPECT_FALSE(workload["spec"].contains("priorityClassName"));
  const json& pod_sets = workload["spec"]["podSets"];
  ASSERT_THAT(pod_sets, SizeIs(3));
  EXPECT_EQ(pod_sets[0]["name"], "scheduler");
  EXPECT_EQ(pod_sets[0]["count"], 1);
  EXPECT_EQ(pod_sets[1]["name"], "server");
  EXPECT_EQ(pod_sets[1]["count"], 1);
  EXPECT_EQ(pod_sets[2]["name"], "worker");
  EXPECT_EQ(pod_sets[2]["count"], 2);
  const json& worker = pod_sets[2]["template"];
  EXPECT_EQ(worker["spec"]["containers"][0]["resources"]["requests"]["cpu"], "2");
  EXPECT_EQ(worker["metadata"]["labels"]["kubeps.io/replica-type"], "worker");
  EXPECT_FALSE(worker["metadata"].contains("name")) << "Kueue allows labels and annotations only";
  EXPECT_FALSE(worker["metadata"].contains("ownerReferences"));
}

TEST(BuildWorkloadTest, ThePriorityClassComesWithItsValue) {
  json manifest = Manifest();
  manifest["spec"]["schedulingPolicy"] = {{"priorityClass", "high"}};
  json workload = BuildWorkload(kId, Parsed(manifest), "q", ImageSet{},
                                WorkloadPriority{"high", kPriorityClassSource, 1000}, kV1beta1);
  EXPECT_EQ(workload["spec"]["priorityClassName"], "high");
  EXPECT_EQ(workload["spec"]["priority"], 1000);
  EXPECT_EQ(workload["spec"]["priorityClassSource"], "scheduling.k8s.io/priorityclass");
  workload = BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_FALSE(workload["spec"].contains("priorityClassName"))
      << "Kueue refuses a priorityClassName without its priority";
}

// Kueue 0.15's v1beta2 (the only version from 0.20) names the class in
// priorityClassRef; a priorityClassName sent there would be pruned, and
// the Workload made without its class.
TEST(BuildWorkloadTest, InV1beta2ThePriorityClassIsAReference) {
  json workload = BuildWorkload(kId, Parsed(), "q", ImageSet{},
                                WorkloadPriority{"high", kPriorityClassSource, 1000}, kV1beta2);
  EXPECT_EQ(workload["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(workload["spec"]["priority"], 1000);
  EXPECT_EQ(workload["spec"]["priorityClassRef"],
            json({{"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"}, {"name", "high"}}));
  EXPECT_FALSE(workload["spec"].contains("priorityClassName"));
  EXPECT_FALSE(workload["spec"].contains("priorityClassSource"));
  workload = BuildWorkload(kId, Parsed(), "q", ImageSet{},
                           WorkloadPriority{"batch", kWorkloadPriorityClassSource, 10}, kV1beta2);
  EXPECT_EQ(
      workload["spec"]["priorityClassRef"],
      json({{"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", "batch"}}));
}

TEST(ReadAdmissionTest, PendingAdmittedEvictedFinished) {
  json workload = {{"metadata", {{"name", "w"}}}};
  EXPECT_FALSE(ReadAdmission(workload).admitted);
  workload = WithCondition(workload, "QuotaReserved", false, "Pending",
                           "couldn't assign flavors to pod set worker", "t0");
  WorkloadAdmission pending = ReadAdmission(workload);
  EXPECT_FALSE(pending.admitted);
  EXPECT_EQ(pending.reason, "Pending");
  EXPECT_THAT(pending.message, HasSubstr("couldn't assign flavors"));

  workload["status"] = Admitted("on-demand");
  WorkloadAdmission admitted = ReadAdmission(workload);
  EXPECT_TRUE(admitted.admitted);
  EXPECT_TRUE(admitted.quota_reserved);
  EXPECT_EQ(admitted.flavors["worker"]["cpu"], "on-demand");
  EXPECT_TRUE(admitted.pod_set_updates.empty());
  workload["status"]["admissionChecks"] = {
      {{"name", "a"}, {"state", "Ready"}, {"podSetUpdates", {{{"name", "worker"}}}}},
      {{"name", "b"},
       {"state", "Ready"},
       {"podSetUpdates",
        {{{"name", "worker"}, {"labels", {{"x", "y"}}}},
         {{"name", "server"}},
         {{"name", "worker"}, {"labels", {{"x", "z"}}}}}}}};
  admitted = ReadAdmission(workload);
  EXPECT_THAT(admitted.pod_set_updates["worker"], SizeIs(2))
      << "each check's, in order; of one check, its first for the pod set, as Kueue reads them";
  EXPECT_EQ(admitted.pod_set_updates["worker"][1].check, "b");
  EXPECT_EQ(admitted.pod_set_updates["worker"][1].update["labels"]["x"], "y");
  EXPECT_THAT(admitted.pod_set_updates["server"], SizeIs(1));
  workload["status"].erase("admissionChecks");

  workload =
      WithCondition(workload, "Evicted", true, "Preempted", "preempted by a higher one", "t1");
  WorkloadAdmission evicted = ReadAdmission(workload);
  EXPECT_TRUE(evicted.evicted);
  EXPECT_FALSE(evicted.admitted) << "eviction wins over the admission still set";
  EXPECT_EQ(evicted.reason, "Preempted");

  workload = WithoutQuotaReservation(workload, "evicted", "t2");
  EXPECT_FALSE(workload["status"].contains("admission"));
  EXPECT_EQ(Condition(workload, "QuotaReserved")["status"], "False");
  EXPECT_EQ(Condition(workload, "Admitted")["status"], "False");
  EXPECT_EQ(Condition(workload, "Admitted")["reason"], "NoReservation");

  workload = WithCondition(workload, "Finished", true, "Succeeded", "done", "t3");
  EXPECT_TRUE(ReadAdmission(workload).finished);
}

TEST(ReadAdmissionTest, ADeactivationsEvictionOfAWorkloadActiveAgainOnlyWaits) {
  json workload = BuildWorkload(kId, Parsed(), "q", ImageSet{}, std::nullopt, kV1beta1);
  workload = WithCondition(workload, "Evicted", true, "Deactivated", "deactivated", "t0");
  workload["spec"]["active"] = false;
  EXPECT_TRUE(ReadAdmission(workload).evicted) << "still off: an eviction";
  workload["spec"]["active"] = true;
  const WorkloadAdmission waits = ReadAdmission(workload);
  EXPECT_FALSE(waits.evicted) << "active again, nothing reserved: it waits";
  EXPECT_EQ(waits.reason, "");
  workload["status"]["admission"] = Admitted("on-demand")["admission"];
  EXPECT_TRUE(ReadAdmission(workload).evicted) << "its reservation must go back first";
  workload = WithCondition(workload, "Evicted", true, "Preempted", "preempted", "t1");
  workload["status"].erase("admission");
  EXPECT_TRUE(ReadAdmission(workload).evicted) << "another eviction stands";
}

json& WorkerResources(json& workload) {
  return workload["spec"]["podSets"][2]["template"]["spec"]["containers"][0]["resources"];
}

TEST(PodSetChangeTest, CountsAndRequestsAsKueueReadsThem) {
  const json made = BuildWorkload(kId, Parsed(), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_EQ(PodSetChange(made, made), "");
  // Kueue's webhook writes quantities canonical, and a limit without a
  // request as the request: the same quota, no change.
  json written = made;
  WorkerResources(written)["requests"] = {{"cpu", 2}, {"memory", "1024Mi"}};
  EXPECT_EQ(PodSetChange(written, made), "");
  json limits_only = made;
  WorkerResources(limits_only) = {{"limits", {{"cpu", "2000m"}, {"memory", "1Gi"}}}};
  EXPECT_EQ(PodSetChange(written, limits_only), "");

  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 3;
  EXPECT_EQ(PodSetChange(made, BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt,
                                             kV1beta1)),
            "worker: 3 pods, was 2");
  json more = made;
  WorkerResources(more)["requests"]["cpu"] = "2.5";
  EXPECT_THAT(PodSetChange(made, more), HasSubstr("worker: requests"));
  json gpu = made;
  WorkerResources(gpu)["limits"] = {{"nvidia.com/gpu", 1}};
  EXPECT_THAT(PodSetChange(made, gpu), HasSubstr("nvidia.com/gpu"));
}

TEST(PodSetChangeTest, TolerationsCountWhileTheWorkloadWaits) {
  // A job that could not fit a tainted flavor, given the toleration while it
  // waits: Kueue assigns flavors by the Workload's, which must follow.
  const json made = BuildWorkload(kId, Parsed(), "q", ImageSet{}, std::nullopt, kV1beta1);
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["tolerations"] = {
      {{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}};
  const json tolerant =
      BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_THAT(PodSetChange(made, tolerant),
              AllOf(HasSubstr("worker: tolerations"), HasSubstr("nvidia.com/gpu")));
  // Quota reserved while an admission check runs: still compared, as Kueue's
  // own job integration does until the Workload is admitted.
  EXPECT_THAT(PodSetChange(made, tolerant, /*reserved=*/true, /*admitted=*/false),
              HasSubstr("worker: tolerations"));
  // Admitted, Kueue added the flavor's own: the job runs on.
  EXPECT_EQ(PodSetChange(made, tolerant, /*reserved=*/true, /*admitted=*/true), "");
}

// Kueue's partial admission: an elastic job's Workload says how few workers
// it can start with (minCount), and Kueue may admit fewer than its count.
TEST(BuildWorkloadTest, AnElasticJobsWorkersMayBeAdmittedDownToItsMinimum) {
  json manifest = Manifest();
  manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 3;
  manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {{"minReplicas", 1},
                                                                 {"maxReplicas", 4}};
  const json elastic =
      BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_EQ(elastic["spec"]["podSets"][2]["count"], 3);
  EXPECT_EQ(elastic["spec"]["podSets"][2]["minCount"], 1);
  EXPECT_FALSE(elastic["spec"]["podSets"][1].contains("minCount")) << "the servers: all of them";
  const json fixed = BuildWorkload(kId, Parsed(), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_FALSE(fixed["spec"]["podSets"][2].contains("minCount"))
      << "a job without elasticPolicy needs all its workers";
  // Changed while the Workload waits, Kueue must see the new minimum; once
  // admitted, Kueue has chosen.
  manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"]["minReplicas"] = 2;
  const json raised = BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt, kV1beta1);
  EXPECT_THAT(PodSetChange(elastic, raised), HasSubstr("worker: at least 2 pods, was 1"));
  EXPECT_THAT(PodSetChange(elastic, raised, /*reserved=*/true, /*admitted=*/false),
              HasSubstr("at least 2"))
      << "admission checks still run";
  EXPECT_EQ(PodSetChange(elastic, raised, /*reserved=*/true, /*admitted=*/true), "");
}

// Kueue's Topology Aware Scheduling: a role's pod template annotated with a
// topology level asks Kueue to place its pods within one domain of that
// level (a rack, a block), the pods in the order of their replica index.
TEST(BuildWorkloadTest, ATopologyAnnotationAsksKueueToPlaceTheRolesPodsByIndex) {
  json manifest = Manifest();
  json& worker = manifest["spec"]["replicaSpecs"]["worker"]["template"];
  worker["metadata"]["annotations"] = {
      {"kueue.x-k8s.io/podset-required-topology", "cloud.google.com/gce-topology-block"}};
  manifest["spec"]["replicaSpecs"]["ps"]["template"] = {
      {"metadata", {{"annotations", {{"kueue.x-k8s.io/podset-preferred-topology", "rack"}}}}}};
  const json pod_sets = BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt,
                                      kV1beta1)["spec"]["podSets"];
  EXPECT_FALSE(pod_sets[0].contains("topologyRequest")) << "the scheduler asks for nothing";
  EXPECT_EQ(pod_sets[1]["topologyRequest"],
            json({{"preferred", "rack"}, {"podIndexLabel", "kubeps.io/replica-index"}}));
  EXPECT_EQ(pod_sets[2]["topologyRequest"],
            json({{"required", "cloud.google.com/gce-topology-block"},
                  {"podIndexLabel", "kubeps.io/replica-index"}}));
  worker["metadata"]["annotations"] = {{"kueue.x-k8s.io/podset-unconstrained-topology", "true"}};
  EXPECT_EQ(BuildWorkload(kId, Parsed(manifest), "q", ImageSet{}, std::nullopt,
                          kV1beta1)["spec"]["podSets"][2]["topologyRequest"],
            json({{"unconstrained", true}, {"podIndexLabel", "kubeps.io/replica-index"}}));
}

// Kueue's waitForPodsReady evicts a Workload whose job's pods are not all
// ready in time, as its job integrations report them: the PodsReady
// condition, Started once they are, then WaitForRecovery and Recovered.
TEST(NextPodsReadyTest, StartedThenWaitingForRecoveryThenRecovered) {
  json workload = {{"metadata", {{"name", "w"}}}};
  auto step = [&workload](bool ready, bool admitted = true) {
    const PodsReadyCondition next = NextPodsReady(workload, admitted, ready);
    workload = WithCondition(workload, "PodsReady", next.ready, next.reason, next.message, "t");
    return std::string(next.ready ? "True " : "False ") + next.reason;
  };
  EXPECT_EQ(step(false), "False WaitForStart");
  EXPECT_EQ(step(false), "False WaitForStart");
  EXPECT_EQ(step(true), "True Started");
  EXPECT_EQ(step(true), "True Started");
  EXPECT_EQ(step(false), "False WaitForRecovery") << "a pod failed after the start";
  EXPECT_EQ(step(false), "False WaitForRecovery");
  EXPECT_EQ(step(true), "True Recovered");
  EXPECT_EQ(step(true), "True Recovered");
  EXPECT_EQ(step(false), "False WaitForRecovery");
  EXPECT_EQ(step(false, /*admitted=*/false), "False WaitForStart") << "evicted, requeued";
  EXPECT_EQ(step(true), "True Started") << "admitted again: a start, not a recovery";
}

TEST(WithConditionTest, KeepsTheTransitionTimeWhileTheStatusStays) {
  json workload = WithCondition({{"metadata", json::object()}}, "Finished", false, "A", "a", "t0");
  workload = WithCondition(workload, "Finished", false, "B", "b", "t1");
  EXPECT_EQ(Condition(workload, "Finished")["lastTransitionTime"], "t0");
  EXPECT_EQ(Condition(workload, "Finished")["reason"], "B");
  workload = WithCondition(workload, "Finished", true, "C", "c", "t2");
  EXPECT_EQ(Condition(workload, "Finished")["lastTransitionTime"], "t2");
  EXPECT_THAT(workload["status"]["conditions"], SizeIs(1));
}

// --- The reconcile of a queued job. ---

TEST_F(QueuedJobTest, WaitsWithoutPodsUntilKueueAdmitsItsWorkload) {
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  const json workload = fake_.Object(workload_);
  ASSERT_FALSE(workload.is_null()) << "the Workload is made";
  EXPECT_THAT(workload["spec"]["podSets"], SizeIs(3));
  EXPECT_EQ(Job()["status"]["phase"], "Suspended");
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("waits for Kueue to admit"));
  EXPECT_THAT(EventReasons(), Contains("CreatedWorkload"));
  EXPECT_GT(requeue_.count(), 0) << "looked at again: there is no watch on Workloads";

  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty()) << "still not admitted";
  EXPECT_THAT(fake_.RequestsTo("POST", CollectionPath(kWorkloads, kNamespace)), SizeIs(1));
}

// Kueue admits an elastic job with fewer workers than it asks for where
// only those fit (partial admission, down to elasticPolicy.minReplicas): it
// trains with them, rather than waiting for the quota of all.
TEST_F(QueuedJobTest, AnElasticJobPartiallyAdmittedTrainsWithTheWorkersKueueAdmitted) {
  MakeElastic();  // 2 workers, at least 1
  Reconcile();
  ASSERT_EQ(fake_.Object(workload_)["spec"]["podSets"][2]["minCount"], 1);
  json status = Admitted("default");
  status["admission"]["podSetAssignments"][2]["count"] = 1;  // the workers
  fake_.SetStatus(workload_, status);
  Reconcile();
  ASSERT_THAT(Pods(), SizeIs(3)) << "the scheduler, the server and 1 worker";
  for (const json& pod : Pods()) {
    for (const json& env : pod["spec"]["containers"][0]["env"]) {
      if (env["name"] == "KUBEPS_NUM_WORKERS") {
        EXPECT_EQ(env["value"], "1");
      }
    }
  }
  EXPECT_THAT(EventReasons(), Contains("PartiallyAdmitted"));
  Reconcile();
  EXPECT_THAT(Pods(), SizeIs(3));
  EXPECT_THAT(fake_.RequestsTo("DELETE", workload_), IsEmpty()) << "the Workload fits the job";
  const std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "PartiallyAdmitted"), 1) << "said once";
}

TEST_F(QueuedJobTest, ThePodsReadinessIsReportedToKueue) {
  RunAdmitted();
  EXPECT_EQ(Condition(fake_.Object(workload_), "PodsReady")["reason"], "WaitForStart");
  auto set_ready = [this](const json& pod, bool ready) {
    fake_.SetStatus(kPods_ + "/" + pod["metadata"]["name"].get<std::string>(),
                    {{"phase", "Running"},
                     {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}});
  };
  const std::vector<json> pods = Pods();
  for (const json& pod : pods) set_ready(pod, true);
  Reconcile();
  json ready = Condition(fake_.Object(workload_), "PodsReady");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["reason"], "Started");
  fake_.ClearRequests();
  Reconcile();
  EXPECT_THAT(fake_.RequestsTo("PUT", workload_), IsEmpty()) << "written only when it changes";
  set_ready(pods[3], false);
  Reconcile();
  EXPECT_EQ(Condition(fake_.Object(workload_), "PodsReady")["reason"], "WaitForRecovery");
  set_ready(pods[3], true);
  Reconcile();
  ready = Condition(fake_.Object(workload_), "PodsReady");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["reason"], "Recovered");
}

// The labels by which Kueue's own integrations take a job's Kueue priority
// (a WorkloadPriorityClass, before the pods' PriorityClass) and its
// execution time limit.
TEST_F(QueuedJobTest, KueuesPriorityClassAndTimeLimitLabelsGoIntoTheWorkload) {
  fake_.Modify(kJob, {{"metadata",
                       {{"labels",
                         {{"kueue.x-k8s.io/priority-class", "urgent"},
                          {"kueue.x-k8s.io/max-exec-time-seconds", "3600"}}}}},
                      {"spec", {{"schedulingPolicy", {{"priorityClass", "high"}}}}}});
  // As in Kueue, no Workload without the priority the job asks for: made
  // without it, it would queue behind jobs it should pass.
  Reconcile();
  EXPECT_TRUE(fake_.Object(workload_).is_null());
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "PriorityClassNotRead");
  fake_.Create("/apis/kueue.x-k8s.io/v1beta1/workloadpriorityclasses",
               {{"metadata", {{"name", "urgent"}}}, {"value", 5000}});
  Reconcile();
  const json spec = fake_.Object(workload_)["spec"];
  EXPECT_EQ(spec["priorityClassName"], "urgent");
  EXPECT_EQ(spec["priority"], 5000);
  EXPECT_EQ(spec["priorityClassSource"], "kueue.x-k8s.io/workloadpriorityclass");
  EXPECT_EQ(spec["maximumExecutionTimeSeconds"], 3600);
}

// No class named: Kueue gives the Workload the cluster's globalDefault
// PriorityClass (of two, the lower, as it breaks a race), as the API server
// gives it to the pods; none without one.
TEST_F(QueuedJobTest, AJobNamingNoClassTakesTheClustersDefaultPriority) {
  const std::string classes = "/apis/scheduling.k8s.io/v1/priorityclasses";
  fake_.Create(classes, {{"metadata", {{"name", "batch"}}}, {"value", 900}});
  fake_.Create(
      classes,
      {{"metadata", {{"name", "cluster-default"}}}, {"value", 100}, {"globalDefault", true}});
  fake_.Create(
      classes,
      {{"metadata", {{"name", "raced-default"}}}, {"value", 200}, {"globalDefault", true}});
  fake_.FailNext("GET", classes, 1, 503);
  Reconcile();
  EXPECT_TRUE(fake_.Object(workload_).is_null()) << "not without the priority it is due";
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "PriorityClassNotRead");
  Reconcile();
  const json spec = fake_.Object(workload_)["spec"];
  EXPECT_EQ(spec["priorityClassName"], "cluster-default");
  EXPECT_EQ(spec["priority"], 100);
  EXPECT_EQ(spec["priorityClassSource"], "scheduling.k8s.io/priorityclass");
}

TEST_F(QueuedJobTest, WithoutADefaultClassTheWorkloadHasNoPriority) {
  fake_.Create("/apis/scheduling.k8s.io/v1/priorityclasses",
               {{"metadata", {{"name", "batch"}}}, {"value", 900}});
  Reconcile();
  const json spec = fake_.Object(workload_)["spec"];
  EXPECT_FALSE(spec.contains("priorityClassName"));
  EXPECT_FALSE(spec.contains("priority"));
}

TEST(MaximumExecutionSecondsTest, APositiveWholeNumberOfSecondsOnly) {
  auto of = [](const std::string& value) {
    return MaximumExecutionSeconds(
        {{"metadata", {{"labels", {{"kueue.x-k8s.io/max-exec-time-seconds", value}}}}}});
  };
  EXPECT_EQ(of("60"), 60);
  EXPECT_EQ(of("0"), std::nullopt);
  EXPECT_EQ(of("-5"), std::nullopt);
  EXPECT_EQ(of("1h"), std::nullopt);
  EXPECT_EQ(of("99999999999"), std::nullopt) << "past an int32";
  EXPECT_EQ(MaximumExecutionSeconds({{"metadata", json::object()}}), std::nullopt);
}

TEST_F(QueuedJobTest, AFinishedJobMarksItsWorkloadFinished) {
  Reconcile();
  fake_.SetStatus(workload_, Admitted("default"));
  Reconcile();
  json status = Job()["status"];
  status["phase"] = "Succeeded";
  status["completionTime"] = "2025-01-01T00:00:00Z";
  fake_.SetStatus(kJob, status);
  Reconcile();
  const json finished = Condition(fake_.Object(workload_), "Finished");
  ASSERT_FALSE(finished.is_null());
  EXPECT_EQ(finished["status"], "True");
  EXPECT_EQ(finished["reason"], "Succeeded");
  fake_.ClearRequests();
  Reconcile();
  EXPECT_THAT(fake_.RequestsTo("GET", workload_), IsEmpty()) << "once";
}

TEST_F(QueuedJobTest, AJobChangedWhileQueuedGetsItsWorkloadMadeAgain) {
  Reconcile();
  const std::string first_uid = fake_.Object(workload_)["metadata"]["uid"];
  ScaleWorkers(3);
  Reconcile();
  EXPECT_TRUE(fake_.Object(workload_).is_null()) << "no pods to wait for: deleted at once";
  EXPECT_THAT(EventReasons(), Contains("DeletedWorkload"));
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("worker: 3 pods, was 2"));
  Reconcile();
  const json remade = fake_.Object(workload_);
  ASSERT_FALSE(remade.is_null());
  EXPECT_NE(remade["metadata"]["uid"], first_uid);
  EXPECT_EQ(remade["spec"]["podSets"][2]["count"], 3);
  EXPECT_THAT(Pods(), IsEmpty()) << "not admitted yet";
}

TEST_F(QueuedJobTest, TolerationsChangedWhileAdmissionChecksRunRemakeTheWorkload) {
  Reconcile();
  json reserved = Admitted("default");  // quota reserved, its admission checks not done
  reserved["conditions"].erase(1);
  fake_.SetStatus(workload_, reserved);
  fake_.Modify(
      kJob,
      {{"spec",
        {{"replicaSpecs",
          {{"worker",
            {{"template",
              {{"spec",
                {{"tolerations", {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}}}}}}}}}}}}}}});
  Reconcile();
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("worker: tolerations"));
  EXPECT_THAT(EventReasons(), Contains("DeletedWorkload"));
}

TEST_F(QueuedJobTest, AnAdmittedJobScaledStopsItsPodsBeforeItsWorkloadIsMadeAgain) {
  MakeElastic();
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  ScaleWorkers(3);
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_EQ(Job()["status"]["phase"], "Suspended");
  EXPECT_FALSE(fake_.Object(workload_).is_null())
      << "the quota stays reserved while the pods terminate";
  Reconcile();  // the cache shows no pod now
  EXPECT_TRUE(fake_.Object(workload_).is_null());
  Reconcile();
  EXPECT_EQ(fake_.Object(workload_)["spec"]["podSets"][2]["count"], 3);
  EXPECT_THAT(Pods(), IsEmpty()) << "waits for Kueue to admit the new Workload";
}

TEST_F(QueuedJobTest, AnAdmittedJobScaledDownWithinItsQuotaTrainsOn) {
  MakeElastic();
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  ScaleWorkers(1);
  Reconcile();
  Reconcile();
  EXPECT_NE(Job()["status"]["phase"], "Suspended");
  EXPECT_THAT(fake_.RequestsTo("DELETE", workload_), IsEmpty());
  EXPECT_THAT(Pods(), SizeIs(::testing::Ge(3))) << "the scheduler and server train on";
}

TEST_F(QueuedJobTest, ADeletionRefusedIsSaidOnceAndTriedAgain) {
  Reconcile();
  ScaleWorkers(3);
  fake_.FailNext("DELETE", workload_, 2, 403);
  Reconcile();
  Reconcile();
  EXPECT_FALSE(fake_.Object(workload_).is_null());
  const std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "WorkloadNotDeleted"), 1) << "said once";
  Reconcile();
  Reconcile();
  EXPECT_EQ(fake_.Object(workload_)["spec"]["podSets"][2]["count"], 3);
}

TEST_F(QueuedJobTest, ASuspendedJobsWorkloadIsDeactivatedAndActiveAgainOnResume) {
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  const json admitted = fake_.Object(workload_);
  Suspend(true);
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_TRUE(IsActive(fake_.Object(workload_))) << "the quota is held while the pods terminate";
  Reconcile();  // the cache shows no pod now
  json workload = fake_.Object(workload_);
  EXPECT_FALSE(IsActive(workload));
  EXPECT_FALSE(workload["status"].contains("admission")) << "the quota is given back";
  EXPECT_EQ(workload["metadata"]["uid"], admitted["metadata"]["uid"]) << "its place kept";
  EXPECT_THAT(EventReasons(), Contains("DeactivatedWorkload"));
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("deactivated"));
  EXPECT_TRUE(workload["metadata"]["annotations"].contains(kWorkloadSuspendedAnnotation));
  // What Kueue writes of a deactivated Workload (0.10 on; "InactiveWorkload" before).
  json evicted =
      WithCondition(workload, "Evicted", true, "Deactivated", "The workload is deactivated", "t1");
  fake_.SetStatus(workload_, evicted["status"]);

  Suspend(false);
  Reconcile();
  workload = fake_.Object(workload_);
  EXPECT_TRUE(IsActive(workload));
  EXPECT_EQ(workload["metadata"]["uid"], admitted["metadata"]["uid"]) << "the same counts";
  EXPECT_THAT(Pods(), IsEmpty()) << "waits for Kueue to admit it again";
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "WaitingForAdmission");
  fake_.SetStatus(workload_, Admitted("default"));
  Reconcile();
  EXPECT_THAT(Pods(), SizeIs(4));
}

TEST_F(QueuedJobTest, AReservationAFailedWriteLeftGoesBackBeforeTheResumedJobWaits) {
  Reconcile();
  fake_.SetStatus(workload_, Admitted("default"));
  Reconcile();
  Suspend(true);
  Reconcile();
  fake_.FailNext("PUT", workload_ + "/status", 1, 409);  // Kueue wrote its eviction meanwhile
  Reconcile();
  EXPECT_GT(requeue_.count(), 0) << "looked at again soon: there is no watch on Workloads";
  json workload = fake_.Object(workload_);
  ASSERT_TRUE(workload["status"].contains("admission"));
  fake_.SetStatus(workload_, WithCondition(workload, "Evicted", true, "InactiveWorkload",
                                           "The workload is deactivated", "t1")["status"]);
  Suspend(false);  // resumed at once
  Reconcile();
  Reconcile();
  workload = fake_.Object(workload_);
  EXPECT_TRUE(IsActive(workload));
  EXPECT_FALSE(workload["status"].contains("admission")) << "not left reserved, never admitted";
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "WaitingForAdmission");
}

TEST_F(QueuedJobTest, AWorkloadKueueDeactivatedStaysOff) {
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  // Kueue's requeuing limit, an admin, an admission check rejected.
  fake_.Modify(workload_, {{"spec", {{"active", false}}}});
  fake_.SetStatus(workload_, WithCondition(fake_.Object(workload_), "Evicted", true,
                                           "DeactivatedDueToRequeuingLimitExceeded",
                                           "exceeded the requeuing limit", "t1")["status"]);
  Reconcile();
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_FALSE(IsActive(fake_.Object(workload_))) << "the operator does not undo it";
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "Evicted");
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("DeactivatedDueToRequeuingLimitExceeded"));
}

TEST_F(QueuedJobTest, KueuesFinalizerIsLiftedFromAWorkloadTheOperatorDeletes) {
  Reconcile();
  fake_.Modify(
      workload_,
      {{"metadata", {{"finalizers", {"kueue.x-k8s.io/resource-in-use", "example.com/keep"}}}}});
  ScaleWorkers(3);
  Reconcile();
  const auto patches = fake_.RequestsTo("PATCH", workload_);
  ASSERT_THAT(patches, SizeIs(1));
  EXPECT_EQ(patches[0].body["metadata"]["finalizers"], json::array({"example.com/keep"}))
      << "another's finalizer stays";
  EXPECT_FALSE(patches[0].body["metadata"]["resourceVersion"].get<std::string>().empty());
}

TEST_F(QueuedJobTest, AWorkloadMadeForTheJobAsItIsIsNeverMadeAgain) {
  Reconcile();
  // However Kueue (a webhook, a newer version) writes the pod sets back,
  // the Workload made for this generation of the job stays: no loop.
  fake_.Modify(workload_, {{"spec", {{"podSets", {{{"name", "main"}, {"count", 1}}}}}}});
  Reconcile();
  Reconcile();
  // Nor from a read of the job older than the one it was made from.
  json older = Job();
  older["metadata"]["generation"] = 0;
  older["spec"]["replicaSpecs"]["worker"]["replicas"] = 1;
  ReconcileResult result;
  ASSERT_TRUE(reconciler_->Reconcile(older, Pods(), &result).ok());
  EXPECT_THAT(fake_.RequestsTo("DELETE", workload_), IsEmpty());
}

TEST_F(QueuedJobTest, AWorkloadBeingDeletedAdmitsNothing) {
  Reconcile();
  fake_.SetStatus(workload_, Admitted("default"));
  fake_.Modify(workload_, {{"metadata", {{"deletionTimestamp", "2025-01-01T00:00:00Z"}}}});
  Reconcile();
  EXPECT_THAT(Pods(), IsEmpty());
  EXPECT_THAT(Job()["status"]["message"], HasSubstr("is being deleted"));
  EXPECT_EQ(Condition(Job(), "Suspended")["reason"], "WorkloadDeleting");
}

}  // namespace
}  // namespace kubeps::kube::queued_job_test
