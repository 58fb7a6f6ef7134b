// An elastic job on the API server (job_reconciler_elastic.cc): the
// scheduler pod reads the desired number of workers from its annotation
// through a downwardAPI volume; scaling the spec (kubectl scale) updates
// the annotation, records an Event, and creates and deletes exactly the
// worker pods the change needs. A job without elasticPolicy scaled keeps
// the workers it started with.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "operator/kube/pod_builder.h"
#include "tests/unit/operator/kube/job_reconciler_fixture.h"

namespace kubeps::kube::reconciler_test {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

json ElasticManifest() {
  json manifest = JobManifest();
  manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {{"minReplicas", 1},
                                                                 {"maxReplicas", 4}};
  return manifest;
}

class ElasticReconcilerTest : public JobReconcilerTest {
 protected:
  // `without_record`: and status.fixedWorkers gone (a status write lost, a
  // CRD that drops the field).
  void ScaleTo(int workers, bool without_record = false) {
    json job = fake_.Object(kJob);
    if (without_record) job["status"].erase("fixedWorkers");
    job["spec"]["replicaSpecs"]["worker"]["replicas"] = workers;
    Response response;
    ASSERT_TRUE(fake_.Put(kJob, job, &response).ok());
    ASSERT_TRUE(response.ok()) << response.Describe();
  }
  json Pod(const std::string& name) { return fake_.Object(kPodsPath + "/" + name); }
  std::vector<std::string> WorkerPods() {
    std::vector<std::string> names;
    for (const auto& name : Names(fake_.List(kPodsPath)))
      if (name.find("worker") != std::string::npos) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }
  // The worker left the job, as its agent says on exit.
  void LeftTheJob(const std::string& name) {
    SetPod(name, "Succeeded", 0, "ScaledAway: left the job at step 80: it was scaled away");
  }
};

TEST_F(ElasticReconcilerTest, TheSchedulerPodReadsTheDesiredWorkersFromItsAnnotation) {
  CreateJob(ElasticManifest());
  ASSERT_TRUE(Reconcile().ok());
  const json scheduler = Pod("mnist-scheduler-0");
  EXPECT_EQ(scheduler["metadata"]["annotations"][kDesiredWorkersAnnotation], "2");
  bool volume = false, env = false;
  for (const json& v : scheduler["spec"]["volumes"]) {
    if (!v.contains("downwardAPI")) continue;
    volume = v["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] ==
             "metadata.annotations['kubeps.io/desired-workers']";
  }
  for (const json& e : scheduler["spec"]["containers"][0]["env"])
    env = env || e["name"] == "KUBEPS_DESIRED_WORKERS_FILE";
  EXPECT_TRUE(volume && env) << scheduler.dump(2);
  EXPECT_FALSE(
      Pod("mnist-worker-0")["metadata"]["annotations"].contains(kDesiredWorkersAnnotation));
  SetAllPods("Running");
  ASSERT_TRUE(Reconcile().ok());
  const json status = StatusOfJob();
  EXPECT_EQ(status["workerSelector"], "kubeps.io/job-name=mnist,kubeps.io/replica-type=worker");
  EXPECT_EQ(status["workerReplicas"], 2);
}

TEST_F(ElasticReconcilerTest, ScalingUpTellsTheSchedulerAndCreatesTheNewWorkersPods) {
  CreateJob(ElasticManifest());
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ScaleTo(4);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(Pod("mnist-scheduler-0")["metadata"]["annotations"][kDesiredWorkersAnnotation], "4");
  EXPECT_THAT(WorkerPods(),
              ElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-worker-2", "mnist-worker-3"));
  EXPECT_THAT(EventReasons(), Contains("Scaled"));
}

// A worker scaled away computes until the scheduler's change step, which
// may come minutes after the scale (steps of seconds: 8 steps ahead at the
// earliest): its pod is deleted only if it has not left 30 s after the
// scheduler says it no longer computes. Before, 30 s after the scale: the job
// lost a member before that step (a rollback, or its failure before its
// first checkpoint).
TEST_F(ElasticReconcilerTest, AWorkerScaledAwayIsNotDeletedWhileTheSchedulerSaysItComputes) {
  json manifest = ElasticManifest();
  manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 3;
  CreateJob(manifest);
  int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  reconciler_->ClockWith([&] { return now_ms; });
  std::optional<std::vector<int>> computing = std::vector<int>{0, 1, 2};
  std::vector<std::string> asked;
  reconciler_->ProbeComputingWith([&](const std::string& host, int) {
    asked.push_back(host);
    return computing;
  });
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ASSERT_FALSE(fake_
                   .SetStatus(kPodsPath + "/mnist-scheduler-0",
                              {{"phase", "Running"}, {"podIP", "10.1.0.7"}})
                   .is_null());
  ScaleTo(2);
  ASSERT_TRUE(Reconcile().ok());
  now_ms += 3 * controller::JobController::kSurplusGraceMs;
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), Contains("mnist-worker-2")) << "it computes every step before its last";
  EXPECT_THAT(asked, Contains("10.1.0.7"));
  computing = std::vector<int>{0, 1};  // the job passed its change step
  ASSERT_TRUE(Reconcile().ok());
  computing = std::nullopt;  // a probe unanswered: the last answer holds
  now_ms += controller::JobController::kSurplusGraceMs - 1000;
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), Contains("mnist-worker-2")) << "it leaves on its own: the grace runs";
  now_ms += 2000;
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), Not(Contains("mnist-worker-2")));
}

TEST_F(ElasticReconcilerTest, ScalingDownDeletesAWorkersPodOnceItHasLeftNotBefore) {
  json manifest = ElasticManifest();
  manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 3;
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ScaleTo(1);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(Pod("mnist-scheduler-0")["metadata"]["annotations"][kDesiredWorkersAnnotation], "1");
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-worker-2"))
      << "they push their last step first";
  LeftTheJob("mnist-worker-2");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1"));
  LeftTheJob("mnist-worker-1");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0"));
  EXPECT_NE(StatusOfJob()["phase"], "Succeeded") << "the job goes on with one worker";
  // Scaled up again: a new pod for the replica that left.
  ScaleTo(2);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), Contains(::testing::StartsWith("mnist-worker-1")));
}

// A worker scaled away and wanted again before its pod was deleted joins in
// a new pod, which is not a restart: scaling must not use up backoffLimit.
TEST_F(ElasticReconcilerTest, AWorkerTakenInAgainIsNotARestart) {
  CreateJob(ElasticManifest());
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ScaleTo(1);
  ASSERT_TRUE(Reconcile().ok());
  LeftTheJob("mnist-worker-1");
  ScaleTo(2);  // before a reconcile deleted its pod
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), Contains("mnist-worker-1-r1"));
  EXPECT_EQ(Pod("mnist-worker-1-r1")["metadata"]["annotations"][kRestartsAnnotation], "0");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_FALSE(StatusOfJob().contains("replicaRestarts")) << StatusOfJob().dump();
  // A failure after that is the replica's first restart, in a pod of its own.
  SetPod("mnist-worker-1-r1", "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(Pod("mnist-worker-1-r2")["metadata"]["annotations"][kRestartsAnnotation], "1");
  EXPECT_EQ(StatusOfJob()["replicaRestarts"]["worker-1"], 1);
}

TEST_F(ElasticReconcilerTest, ARunningJobScaledPastItsBoundsTrainsAtTheBoundAndSaysSo) {
  CreateJob(ElasticManifest());
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ASSERT_TRUE(Reconcile().ok());
  ScaleTo(9);  // nothing at the API server refuses it
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_NE(StatusOfJob()["phase"], "Failed") << StatusOfJob().dump(2);
  EXPECT_EQ(Pod("mnist-scheduler-0")["metadata"]["annotations"][kDesiredWorkersAnnotation], "4");
  EXPECT_EQ(WorkerPods().size(), 4u);
  EXPECT_THAT(EventReasons(), Contains("ScaleOutOfBounds"));
}

TEST_F(ElasticReconcilerTest, AJobWithFixedWorkersHasNoDesiredWorkersAnnotation) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_FALSE(
      Pod("mnist-scheduler-0")["metadata"]["annotations"].contains(kDesiredWorkersAnnotation));
  EXPECT_THAT(EventReasons(), Not(Contains("Scaled")));
}

// Every TrainingJob has the scale subresource, so kubectl scale (or an
// autoscaler aimed at the wrong job) reaches a job without elasticPolicy
// too. Its scheduler knows a fixed number of workers: a third worker's pod
// was refused by it, restarted until backoffLimit, and failed the job.
TEST_F(ElasticReconcilerTest, AJobWithFixedWorkersScaledKeepsItsWorkersAndSaysSo) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["fixedWorkers"], 2);
  ScaleTo(3);
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1"));
  EXPECT_EQ(StatusOfJob()["phase"], "Running") << StatusOfJob().dump(2);
  EXPECT_EQ(StatusOfJob()["workers"], "2/2");
  EXPECT_THAT(StatusOfJob()["message"].get<std::string>(),
              HasSubstr("spec.replicaSpecs.worker.replicas 3: this job has no elasticPolicy; it "
                        "trains on with its 2 workers"));
  const std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "ScaleRefused"), 1);
  // Suspended, its pods gone, it starts again with the number it asks for.
  fake_.Modify(kJob, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_FALSE(StatusOfJob().contains("fixedWorkers")) << StatusOfJob().dump(2);
  fake_.Modify(kJob, {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-worker-2"));
  EXPECT_EQ(StatusOfJob()["fixedWorkers"], 3);
}

// The number comes from the scheduler pod, which was made for it: a status
// write that did not land (a conflict with the scale itself), a job from an
// operator before the record, or a CRD whose schema drops the field.
TEST_F(ElasticReconcilerTest, AScaledFixedJobWithoutItsRecordKeepsItsSchedulerPodsWorkers) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ScaleTo(3, /*without_record=*/true);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1"));
  EXPECT_EQ(StatusOfJob()["fixedWorkers"], 2);
}

// Its scheduler pod on its way out (deleted from outside, its node lost)
// while the record is missing too (a CRD whose schema drops it): the other
// pods were made for the number all the same.
TEST_F(ElasticReconcilerTest, AScaledFixedJobTakesTheNumberFromItsOtherPodsWhileItsSchedulerGoes) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  fake_.Modify(kPodsPath + "/mnist-scheduler-0",
               {{"metadata", {{"deletionTimestamp", "2026-12-04T20:00:00Z"}}}});
  ScaleTo(3, /*without_record=*/true);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1"));
  EXPECT_EQ(StatusOfJob()["fixedWorkers"], 2);
}

// An empty elasticPolicy is no policy (api::ElasticPolicy::enabled): the
// job's scheduler knows a fixed number all the same.
TEST_F(ElasticReconcilerTest, AJobWithAnEmptyElasticPolicyScaledKeepsItsWorkers) {
  json manifest = JobManifest();
  manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = json::object();
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ScaleTo(3);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(WorkerPods(), ElementsAre("mnist-worker-0", "mnist-worker-1"));
  EXPECT_THAT(EventReasons(), Contains("ScaleRefused"));
}

}  // namespace
}  // namespace kubeps::kube::reconciler_test
