// The operator's reconcile of one TrainingJob (operator/kube/job_reconciler.h)
// against the fake API server: what a new job gets, that a second pass and a
// restarted operator change nothing, how failed pods are replaced, how the
// status is written (through /status, never over a newer object), that a
// finished job stays finished, that a job applied again owns only its own
// objects (by uid), and the invalid, suspended and finished cases.
#include "operator/kube/job_reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time_format.h"
#include "tests/unit/operator/kube/job_reconciler_fixture.h"

namespace kubeps::kube {
namespace {

using namespace reconciler_test;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

TEST_F(JobReconcilerTest, AJobThatBringsItsOwnProgramRunsItBesideTheAgentSidecar) {
  json manifest = JobManifest();
  manifest["spec"].erase("dataset");
  manifest["spec"]["replicaSpecs"]["worker"]["template"] = {
      {"spec",
       {{"containers", json::array({{{"name", "trainer"},
                                     {"image", "registry.example/mlp:1"},
                                     {"command", json::array({"python3", "train.py"})}}})}}}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_NE(StatusOfJob().value("phase", ""), "Failed") << StatusOfJob().dump();
  EXPECT_THAT(Names(fake_.List(kPodsPath)), UnorderedElementsAreArray(kPodNames));
  const json worker = fake_.Object(kPodsPath + "/mnist-worker-0");
  EXPECT_EQ(worker["spec"]["containers"][0]["name"], "trainer");
  EXPECT_EQ(worker["spec"]["initContainers"][0]["name"], "kubeps-agent");
  EXPECT_EQ(worker["spec"]["initContainers"][0]["command"],
            json::array({"kubeps-agent", "--serve"}));
  const json server = fake_.Object(kPodsPath + "/mnist-server-0");
  EXPECT_FALSE(server["spec"].contains("initContainers"));
}

TEST_F(JobReconcilerTest, ANewJobGetsItsSecretServicesAndPodsOwnedByIt) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(Names(fake_.List(kPodsPath)), UnorderedElementsAreArray(kPodNames));
  EXPECT_THAT(Names(fake_.List(kServicesPath)), UnorderedElementsAre("mnist", "mnist-scheduler"));
  EXPECT_THAT(Names(fake_.List(kSecretsPath)), UnorderedElementsAre("mnist-token"));
  std::vector<json> owned = fake_.List(kPodsPath);
  for (const auto& more : {fake_.List(kServicesPath), fake_.List(kSecretsPath)})
    owned.insert(owned.end(), more.begin(), more.end());
  for (const auto& object : owned) {
    const json& owners = object["metadata"]["ownerReferences"];
    ASSERT_EQ(owners.size(), 1u) << object["metadata"]["name"];
    EXPECT_EQ(owners[0]["uid"], uid_);
    EXPECT_EQ(owners[0]["kind"], "TrainingJob");
    EXPECT_EQ(owners[0]["controller"], true);
  }
  // Garbage collection would take them all with the job.
  fake_.Remove(kJob);
  EXPECT_EQ(fake_.CollectGarbage(), static_cast<int>(owned.size()));
}

// The status says what the pass observed before it acted: no pods yet.
TEST_F(JobReconcilerTest, TheFirstStatusSaysCreatedAndTheJobIsLookedAtAgain) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Created");
  EXPECT_EQ(status["workers"], "0/2");
  EXPECT_EQ(status["observedGeneration"], 1);
  EXPECT_FALSE(status.value("startTime", "").empty());
  EXPECT_EQ(fake_.RequestsTo("PUT", kJob + "/status").size(), 1u);
  EXPECT_EQ(result_.requeue_after, std::chrono::seconds(5));
  const auto reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "CreatedPod"), 4);
}

TEST_F(JobReconcilerTest, APassWithNothingChangedWritesNothing) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(Reconcile().ok());  // observes the pods the first pass made
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  for (const auto& request : fake_.requests()) {
    EXPECT_EQ(request.method, "GET") << request.method << " " << request.path;
  }
}

// The cache lags behind the operator's own creates (the watch event comes
// after the create's answer): a pass that does not see the pods the last one
// made does not create them again. Before, every such pass sent a POST per
// pod, met 409 AlreadyExists and read the pod back.
TEST_F(JobReconcilerTest, PodsCreatedButNotYetInTheCacheAreNotCreatedAgain) {
  CreateJob();
  ASSERT_TRUE(ReconcileWith(fake_.Object(kJob), {}).ok());
  ASSERT_EQ(fake_.RequestsTo("POST", kPodsPath).size(), kPodNames.size());
  fake_.ClearRequests();
  ASSERT_TRUE(ReconcileWith(fake_.Object(kJob), {}).ok());  // the cache shows none yet
  EXPECT_THAT(fake_.RequestsTo("POST", kPodsPath), IsEmpty());
  for (const auto& name : kPodNames)
    EXPECT_THAT(fake_.RequestsTo("GET", kPodsPath + "/" + name), IsEmpty()) << name;
  // Once the cache shows them, it is the truth again: a pod deleted from
  // outside since is made again.
  ASSERT_TRUE(Reconcile().ok());
  fake_.Remove(kPodsPath + "/mnist-worker-1");
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(fake_.RequestsTo("POST", kPodsPath).size(), 1u);
}

// A restarted operator has no memory, and its pod cache may lag: creating
// what exists already (409 AlreadyExists) is not an error, and the job's
// token is not replaced.
TEST_F(JobReconcilerTest, ARestartedOperatorDuplicatesNothing) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  const json token = fake_.Object(kSecretsPath + "/mnist-token");
  reconciler_ = std::make_unique<JobReconciler>(&fake_, JobObjectOptions{}, metrics_.get());
  fake_.ClearRequests();
  ASSERT_TRUE(ReconcileWith(fake_.Object(kJob), {}).ok());
  EXPECT_EQ(fake_.RequestsTo("POST", kPodsPath).size(), kPodNames.size());
  EXPECT_THAT(Names(fake_.List(kPodsPath)), UnorderedElementsAreArray(kPodNames));
  EXPECT_EQ(fake_.Object(kSecretsPath + "/mnist-token"), token);
  const auto reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "CreatedPod"), 4)
      << "no CreatedPod event for pods that existed";
}

TEST_F(JobReconcilerTest, RunningPodsMakeARunningJob) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  ASSERT_TRUE(Reconcile().ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Running");
  json running;
  for (const auto& condition : status["conditions"]) {
    if (condition["type"] == "Running") running = condition;
  }
  EXPECT_EQ(running["status"], "True");
  EXPECT_EQ(running["reason"], "JobRunning");
  EXPECT_EQ(Metric("kubeps_operator_job_startup_seconds"), 1);
}

// Pods the scheduler has not placed yet (no GPU free, an image still
// pulling) are not running, and `kubectl get tj` must not say they are.
TEST_F(JobReconcilerTest, PendingPodsDoNotMakeARunningJob) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(Reconcile().ok());  // observes the pods, all Pending
  EXPECT_EQ(StatusOfJob()["phase"], "Created");
  EXPECT_EQ(Metric("kubeps_operator_job_startup_seconds"), 0);
  SetAllPods("Running");
  SetPod("mnist-worker-1", "Pending");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["phase"], "Created");
}

TEST_F(JobReconcilerTest, AFailedWorkerPodIsReplacedByANewPod) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  SetPod("mnist-worker-1", "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1").is_null()) << "the failed pod is deleted";
  json replacement = fake_.Object(kPodsPath + "/mnist-worker-1-r1");
  ASSERT_FALSE(replacement.is_null());
  EXPECT_EQ(replacement["metadata"]["annotations"][kRestartsAnnotation], "1");
  EXPECT_EQ(replacement["spec"]["hostname"], "mnist-worker-1") << "same DNS name as before";
  EXPECT_EQ(StatusOfJob()["phase"], "Restarting");
  EXPECT_EQ(StatusOfJob()["replicaStatuses"]["worker"]["restarts"], 1);
  EXPECT_EQ(Metric("kubeps_operator_replica_restarts_total"), 1);
  EXPECT_THAT(EventReasons(), Contains("CreatedPod"));
}

// A job's own program exits 1 after a shard refused its NaN gradient; its
// agent (a native sidecar: initContainerStatuses) says why. Before, only
// the main containers' messages were read, and the worker was restarted
// until the backoffLimit.
TEST_F(JobReconcilerTest, TheAgentSidecarsTerminationMessageFailsTheJobWithItsReason) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  json pod_status = {
      {"phase", "Failed"},
      {"containerStatuses",
       {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 1}}}}}}}},
      {"initContainerStatuses",
       {{{"name", "kubeps-agent"},
         {"state",
          {{"terminated",
            {{"exitCode", 0},
             {"message", "NonFiniteGradient: the gradient of worker-1 is not finite"}}}}}}}}};
  ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-1", pod_status).is_null());
  ASSERT_TRUE(Reconcile().ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Failed") << status.dump();
  json failed;
  for (const auto& condition : status["conditions"]) {
    if (condition["type"] == "Failed") failed = condition;
  }
  EXPECT_EQ(failed["status"], "True") << status.dump();
  EXPECT_EQ(failed["reason"], "NonFiniteGradient");
  EXPECT_THAT(failed["message"].get<std::string>(),
              HasSubstr("worker-1 failed and is not restarted"));
  EXPECT_TRUE(fake_.Object(kPodsPath + "/mnist-worker-1-r1").is_null()) << "a worker restarted";
}

// `kubectl delete pod` of a restarted worker, a node drained: before, the
// count lived only on the pods, so the replacement started again at 0 and
// the backoffLimit never came. The job's status keeps each replica's count.
TEST_F(JobReconcilerTest, APodDeletedFromOutsideKeepsItsRestartCount) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  SetPod("mnist-worker-1", "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  SetPod("mnist-worker-1-r1", "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  SetPod("mnist-worker-1-r2", "Running");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["replicaStatuses"]["worker"]["restarts"], 2);
  EXPECT_EQ(StatusOfJob()["replicaRestarts"]["worker-1"], 2) << StatusOfJob().dump();

  fake_.Remove(kPodsPath + "/mnist-worker-1-r2");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["replicaStatuses"]["worker"]["restarts"], 2) << StatusOfJob().dump();
  json replacement;
  for (const auto& pod : fake_.List(kPodsPath)) {
    if (pod["metadata"]["labels"].value("kubeps.io/replica-index", "") == "1" &&
        pod["metadata"]["labels"].value("kubeps.io/replica-type", "") == "worker")
      replacement = pod;
  }
  ASSERT_FALSE(replacement.is_null()) << "worker-1 was not re-created";
  EXPECT_EQ(replacement["metadata"]["annotations"][kRestartsAnnotation], "2");

  // One more failure is one too many under backoffLimit 2.
  SetPod(replacement["metadata"]["name"], "Running");
  ASSERT_TRUE(Reconcile().ok());
  SetPod(replacement["metadata"]["name"], "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["phase"], "Failed") << StatusOfJob().dump();
}

// Someone changed the job between the cache's copy and our write: the
// status is written again onto the newest object, keeping their change.
// A status computed from an older read must not land on a newer object: on
// a 409 nothing is written, and the job is reconciled again soon from the
// newer one.
TEST_F(JobReconcilerTest, AStatusComputedFromAnOlderReadIsNotWrittenOverANewerObject) {
  CreateJob();
  const json cached = fake_.Object(kJob);
  fake_.Modify(kJob, {{"metadata", {{"labels", {{"team", "vision"}}}}}});
  ASSERT_TRUE(ReconcileWith(cached, {}).ok());
  const auto writes = fake_.RequestsTo("PUT", kJob + "/status");
  ASSERT_EQ(writes.size(), 1u) << "no second write of the same computation";
  EXPECT_EQ(writes[0].body["metadata"]["resourceVersion"], cached["metadata"]["resourceVersion"]);
  EXPECT_TRUE(StatusOfJob().is_null());
  EXPECT_EQ(result_.requeue_after, std::chrono::milliseconds(250));
  ASSERT_TRUE(Reconcile().ok());
  json job = fake_.Object(kJob);
  EXPECT_EQ(job["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(job["status"]["phase"], "Created");
}

TEST_F(JobReconcilerTest, ConflictsRequeueTheJobRatherThanFailTheReconcile) {
  CreateJob();
  fake_.FailNext("PUT", kJob + "/status", 100, 409);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(StatusOfJob().is_null()) << "nothing was written";
  EXPECT_EQ(result_.requeue_after, std::chrono::milliseconds(250));
}

// A stored job that the CRD's rules refuse now (a rule added since it was
// written, on a server before Kubernetes 1.30, which does not ratchet them)
// takes no status write: the reconcile fails and is retried, and a Warning
// Event says why once, in the API server's words.
TEST_F(JobReconcilerTest, AStatusTheApiServerRefusesIsSaidOnceInAnEvent) {
  CreateJob();
  const json of_spec = {{"causes",
                         {{{"reason", "FieldValueInvalid"},
                           {"field",
                            "spec.replicaSpecs.worker.template.spec."
                            "containers[1].name"}}}}};
  fake_.FailNext("PUT", kJob + "/status", 2, 422, of_spec);
  EXPECT_FALSE(Reconcile().ok());
  EXPECT_FALSE(Reconcile().ok());
  auto refusals = [&] {
    std::vector<std::string> messages;
    for (const json& event : fake_.List(kEventsPath)) {
      if (event["reason"] == "StatusRefused" && event["type"] == "Warning")
        messages.push_back(event["message"]);
    }
    return messages;
  };
  ASSERT_THAT(refusals(), SizeIs(1));
  EXPECT_THAT(refusals()[0], HasSubstr("the API server refuses this job's status (422"));
  EXPECT_THAT(refusals()[0], HasSubstr("kubeps validate the job, and correct its spec"));

  // A CRD older than the operator refuses what it writes in the status.
  const json of_status = {
      {"causes", {{{"reason", "FieldValueNotSupported"}, {"field", "status.phase"}}}}};
  fake_.FailNext("PUT", kJob + "/status", 1, 422, of_status);
  EXPECT_FALSE(Reconcile().ok());
  // (Events are listed by their names, which end at random.)
  EXPECT_THAT(refusals(),
              UnorderedElementsAre(HasSubstr("kubeps validate the job, and correct its spec"),
                                   AllOf(HasSubstr("the TrainingJob CRD is older than this "
                                                   "operator"),
                                         Not(HasSubstr("kubeps validate")))));
}

// The cache still shows the job running after the operator finished it and
// (cleanPodPolicy All) deleted its pods: a write's response can come before
// its watch event. Reconciling that stale view must not start the job again.
TEST_F(JobReconcilerTest, AFinishedJobSeenStaleInTheCacheGetsNoNewPods) {
  const json running = RunCleanAllJobToItsEnd();
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_EQ(StatusOfJob()["phase"], "Succeeded");
  ASSERT_THAT(fake_.List(kPodsPath), IsEmpty());
  fake_.ClearRequests();
  ASSERT_TRUE(ReconcileWith(running, {}).ok());
  EXPECT_TRUE(fake_.RequestsTo("POST", kPodsPath).empty()) << "pods made for a finished job";
  EXPECT_TRUE(fake_.RequestsTo("PUT", kJob + "/status").empty());
  EXPECT_EQ(StatusOfJob()["phase"], "Succeeded");
}

// Worker 0 said where training ended as it exited: the finished job's
// status holds that step and the test accuracy, whatever a probe last saw
// (here: none, as for a job shorter than the probe's interval), and its
// progress is complete.
TEST_F(JobReconcilerTest, AFinishedJobShowsWhereWorkerZeroSaidTrainingEnded) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Succeeded");
  const json last_words = {
      {"phase", "Succeeded"},
      {"containerStatuses",
       {{{"name", "worker"},
         {"state",
          {{"terminated",
            {{"exitCode", 0},
             {"message",
              "TrainingFinished: step=1404 totalSteps=1404 stepsPerSecond=178.25 loss=0.3720 "
              "testAccuracy=0.8665\n"}}}}}}}}};
  ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/mnist-worker-0", last_words).is_null());
  ASSERT_TRUE(Reconcile().ok());
  const json status = StatusOfJob();
  ASSERT_EQ(status["phase"], "Succeeded") << status.dump();
  EXPECT_EQ(status["step"], 1404);
  EXPECT_EQ(status["totalSteps"], 1404);
  EXPECT_EQ(status["progress"], "100%");
  EXPECT_EQ(status["eta"], "0s");
  EXPECT_EQ(status["stepsPerSecond"], "178.2");
  EXPECT_EQ(status["loss"], "0.3720");
  EXPECT_EQ(status["testAccuracy"], "0.8665");
}

// A job that failed part way shows how far it got, and no time left.
TEST_F(JobReconcilerTest, AFailedJobKeepsItsProgressButHasNoEta) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  json job = fake_.Object(kJob);
  job["status"]["step"] = 300;
  job["status"]["totalSteps"] = 1200;
  job["status"]["stepsPerSecond"] = "10.0";
  job["status"]["eta"] = "90s";
  ASSERT_FALSE(fake_.SetStatus(kJob, job["status"]).is_null());
  SetPod("mnist-worker-1", "Failed", 1);
  ASSERT_TRUE(Reconcile().ok());
  const json status = StatusOfJob();
  ASSERT_EQ(status["phase"], "Failed") << status.dump();
  EXPECT_EQ(status["step"], 300);
  EXPECT_EQ(status["progress"], "25%");
  EXPECT_FALSE(status.contains("eta")) << status.dump();
}

// The terminal status meets a conflict after the pods were deleted: the next
// reconcile writes that status again; it does not run the job logic on a job
// that looks unfinished and has no pods.
TEST_F(JobReconcilerTest, ATerminalStatusThatMeetsAConflictIsWrittenAgainNotRecomputed) {
  const json running = RunCleanAllJobToItsEnd();
  fake_.FailNext("PUT", kJob + "/status", 1, 409);
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_THAT(fake_.List(kPodsPath), IsEmpty());
  ASSERT_NE(StatusOfJob().value("phase", ""), "Succeeded");
  fake_.ClearRequests();
  ASSERT_TRUE(ReconcileWith(running, {}).ok());
  EXPECT_TRUE(fake_.RequestsTo("POST", kPodsPath).empty()) << "pods made for a finished job";
  EXPECT_EQ(StatusOfJob()["phase"], "Succeeded");
  EXPECT_THAT(EventReasons(), Contains("JobSucceeded"));
}

// Deleted and applied again at once: the garbage collector has not yet
// deleted the old job's Secret, Services and pods, which have the new job's
// names and labels. They are not adopted; the new job waits for them to go.
TEST_F(JobReconcilerTest, AJobAppliedAgainDoesNotAdoptItsPredecessorsObjects) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  const std::string old_uid = uid_;
  fake_.Remove(kJob);
  CreateJob();
  ASSERT_NE(uid_, old_uid);
  Status s = Reconcile();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("not owned by this job"));
  EXPECT_GT(fake_.CollectGarbage(), 0);
  ASSERT_TRUE(Reconcile().ok());
  for (const std::string& path : {kSecretsPath, kServicesPath, kPodsPath}) {
    const auto objects = fake_.List(path);
    EXPECT_FALSE(objects.empty()) << path;
    for (const auto& object : objects) {
      EXPECT_EQ(object["metadata"]["ownerReferences"][0]["uid"], uid_)
          << object["metadata"]["name"];
    }
  }
}

// Only the pods may still be the predecessor's (their deletion is graceful):
// a replica whose name is taken is not adopted but waited for.
TEST_F(JobReconcilerTest, APodOfThePredecessorIsWaitedForNotAdopted) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Running");
  const std::vector<json> old_pods = fake_.List(kPodsPath);
  fake_.Remove(kJob);
  for (const std::string& path : {kSecretsPath, kServicesPath}) {
    for (const auto& name : Names(fake_.List(path))) fake_.Remove(path + "/" + name);
  }
  CreateJob();
  ASSERT_TRUE(ReconcileWith(fake_.Object(kJob), old_pods).ok());
  EXPECT_TRUE(fake_.RequestsTo("DELETE", kPodsPath).empty());
  EXPECT_EQ(StatusOfJob().value("phase", ""), "Created") << "the old job's pods ran, not ours";
  EXPECT_EQ(StatusOfJob().value("workers", ""), "0/2");
  for (const auto& pod : fake_.List(kPodsPath)) {
    EXPECT_NE(pod["metadata"]["ownerReferences"][0]["uid"], uid_) << "nothing new yet";
  }
  fake_.CollectGarbage();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(Names(fake_.List(kPodsPath)), UnorderedElementsAreArray(kPodNames));
  for (const auto& pod : fake_.List(kPodsPath))
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], uid_);
}

TEST_F(JobReconcilerTest, AJobDeletedMeanwhileIsNotAnError) {
  CreateJob();
  const json cached = fake_.Object(kJob);
  fake_.Remove(kJob);
  EXPECT_TRUE(ReconcileWith(cached, {}).ok());
}

TEST_F(JobReconcilerTest, AnInvalidSpecFailsTheJobWithoutPods) {
  json manifest = JobManifest();
  manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 0;
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Failed");
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("worker.replicas"));
  EXPECT_EQ(status["conditions"].back()["reason"], "InvalidSpec");
  EXPECT_THAT(fake_.List(kPodsPath), IsEmpty());
  EXPECT_THAT(EventReasons(), Contains("InvalidSpec"));
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(fake_.requests(), IsEmpty()) << "a failed job is left alone";
}

TEST_F(JobReconcilerTest, ASuspendedJobHasNoPods) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  fake_.Modify(kJob, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(fake_.List(kPodsPath), IsEmpty());
  EXPECT_EQ(StatusOfJob()["phase"], "Suspended");
  EXPECT_EQ(StatusOfJob().value("startTime", ""), "")
      << "activeDeadlineSeconds would count the time held against the job once resumed";
  EXPECT_THAT(EventReasons(), Contains("JobSuspended"));
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.RequestsTo("PUT", kJob).empty()) << "the same status is not written again";
}

TEST_F(JobReconcilerTest, ASucceededJobKeepsItsFinishedPods) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  SetAllPods("Succeeded");
  ASSERT_TRUE(Reconcile().ok());
  json status = StatusOfJob();
  EXPECT_EQ(status["phase"], "Succeeded");
  EXPECT_FALSE(status.value("completionTime", "").empty());
  EXPECT_EQ(status["replicaStatuses"]["worker"]["succeeded"], 2);
  EXPECT_EQ(fake_.List(kPodsPath).size(), kPodNames.size()) << "cleanPodPolicy Running keeps them";
  EXPECT_EQ(result_.requeue_after.count(), 0);
}

TEST_F(JobReconcilerTest, AFinishedJobIsDeletedOnlyAfterItsTtl) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 3600}};
  CreateJob(manifest);
  auto finished = [&](std::chrono::system_clock::duration ago) {
    fake_.SetStatus(kJob, {{"phase", "Succeeded"},
                           {"completionTime", Rfc3339(std::chrono::system_clock::now() - ago)}});
  };
  finished(std::chrono::minutes(10));
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_FALSE(fake_.Object(kJob).is_null());
  EXPECT_GT(result_.requeue_after, std::chrono::minutes(45));
  EXPECT_LE(result_.requeue_after, std::chrono::minutes(50));

  finished(std::chrono::hours(2));
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.Object(kJob).is_null());
}

// The job deleted and applied again under its name (a CI script that saw
// it succeed) while the cache still held the finished one: its TTL
// deletion, from that stale copy, is of that job only, as Kubernetes' TTL
// controller deletes with the uid it read.
TEST_F(JobReconcilerTest, ATtlDeletionFromAStaleCopyLeavesAJobMadeAgainUnderItsName) {
  json manifest = JobManifest();
  manifest["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 0}};
  CreateJob(manifest);
  const json finished =
      fake_.SetStatus(kJob, {{"phase", "Succeeded"}, {"completionTime", "2025-01-01T00:00:00Z"}});
  fake_.Remove(kJob);
  const json again = fake_.Create(kJobsPath, manifest);
  ASSERT_TRUE(ReconcileWith(finished, {}).ok());
  ASSERT_FALSE(fake_.Object(kJob).is_null());
  EXPECT_EQ(fake_.Object(kJob)["metadata"]["uid"], again["metadata"]["uid"]);
}

// A Service deleted from under a running job (by hand, a cleanup script):
// without it a restarted replica cannot reach the scheduler. It is made
// again at the next look, at most owned_objects_recheck after the last.
TEST_F(JobReconcilerTest, AServiceDeletedFromUnderARunningJobIsMadeAgain) {
  JobObjectOptions options;
  options.owned_objects_recheck = std::chrono::milliseconds(0);
  reconciler_ = std::make_unique<JobReconciler>(&fake_, options, metrics_.get());
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  fake_.Remove(kServicesPath + "/mnist-scheduler");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_FALSE(fake_.Object(kServicesPath + "/mnist-scheduler").is_null());
}

TEST_F(JobReconcilerTest, ARunningJobsServicesAreNotLookedAtOnEveryReconcile) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.RequestsTo("GET", kServicesPath + "/mnist-scheduler").empty());
}

TEST_F(JobReconcilerTest, AServiceThatCannotBeCreatedYetFailsTheReconcileSoThatItIsRetried) {
  CreateJob();
  fake_.FailNext("POST", kServicesPath, 1, 503);
  Status s = Reconcile();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("Service mnist"));
  EXPECT_THAT(s.message(), HasSubstr("503"));
  EXPECT_THAT(fake_.List(kPodsPath), IsEmpty()) << "no pods before their Services";
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(fake_.List(kServicesPath).size(), 2u);
}

// The API server throttles (429), fails over (5xx) or drops a connection:
// the pod is created on a later pass and the job goes on. Only a request the
// server refuses for good (422 Invalid) fails the job.
TEST_F(JobReconcilerTest, ATransientErrorCreatingAPodIsRetriedNotAFailedJob) {
  for (int code : {0, 429, 500, 503}) {
    SCOPED_TRACE("code " + std::to_string(code));
    fake_.Remove(kJob);
    fake_.CollectGarbage();  // the last round's job's objects
    CreateJob();
    fake_.FailNext("POST", kPodsPath, 1, code);
    ASSERT_TRUE(Reconcile().ok());
    EXPECT_EQ(StatusOfJob()["phase"], "Created");
    EXPECT_GT(result_.requeue_after.count(), 0);
    ASSERT_TRUE(Reconcile().ok());
    EXPECT_EQ(fake_.List(kPodsPath).size(), kPodNames.size());
    EXPECT_EQ(StatusOfJob()["phase"], "Created");
  }
}

TEST_F(JobReconcilerTest, APodTheServerRefusesFailsTheJob) {
  CreateJob();
  fake_.FailNext("POST", kPodsPath, 1, 422);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(StatusOfJob()["phase"], "Failed");
  EXPECT_EQ(StatusOfJob()["conditions"].back()["reason"], "CreateFailed");
}

// A Service, Secret or PodGroup the API server will never take (forbidden by
// RBAC or admission, a kind it does not serve): the job fails and says why,
// rather than the operator retrying forever with only a log line.
TEST_F(JobReconcilerTest, AnObjectTheServerRefusesFailsTheJobSayingWhich) {
  for (int code : {403, 404, 422}) {
    SCOPED_TRACE("code " + std::to_string(code));
    fake_.Remove(kJob);
    fake_.CollectGarbage();
    CreateJob();
    fake_.FailNext("POST", kServicesPath, 1, code);
    ASSERT_TRUE(Reconcile().ok());
    const json status = StatusOfJob();
    EXPECT_EQ(status["phase"], "Failed");
    EXPECT_EQ(status["conditions"].back()["reason"], "CreateFailed");
    EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("creating Service mnist"));
    EXPECT_THAT(status["message"].get<std::string>(), HasSubstr(std::to_string(code)));
    EXPECT_THAT(EventReasons(), Contains("CreateFailed"));
    EXPECT_THAT(fake_.List(kPodsPath), IsEmpty());
  }
}

TEST_F(JobReconcilerTest, EventsAreBestEffort) {
  CreateJob();
  fake_.FailNext("POST", kEventsPath, 100, 500);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(fake_.List(kPodsPath).size(), kPodNames.size());
  EXPECT_EQ(StatusOfJob()["phase"], "Created");
}

}  // namespace
}  // namespace kubeps::kube
