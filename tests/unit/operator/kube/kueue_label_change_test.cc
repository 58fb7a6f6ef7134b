// Kueue's labels on a job changed after its Workload was made: a label
// change bumps no generation, so nothing else would follow them. A job
// moved to another queue (kueue.x-k8s.io/queue-name) while its Workload
// waits moves the Workload there, as Kueue's own job integrations do for a
// suspended job; an admitted job stays where Kueue admitted it (Kueue's
// webhooks refuse the change for a running job; here an Event says it was
// not followed). A new kueue.x-k8s.io/priority-class gives the Workload
// that class and its value, as Kueue's UpdateWorkloadPriority does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

using ::testing::Contains;
using ::testing::Not;
using ::testing::SizeIs;

class KueueLabelChangeTest : public QueuedJobTest {
 protected:
  void MoveTo(const std::string& queue) { Label(kQueueNameLabel, queue); }
  void Label(const std::string& key, const std::string& value) {
    fake_.Modify(kJob, {{"metadata", {{"labels", {{key, value}}}}}});
  }
  void MakePriorityClass(const std::string& name, int value) {
    fake_.Create("/apis/kueue.x-k8s.io/v1beta1/workloadpriorityclasses",
                 {{"metadata", {{"name", name}}}, {"value", value}});
  }
  int Count(const std::string& reason) {
    std::vector<std::string> reasons = EventReasons();
    return static_cast<int>(std::count(reasons.begin(), reasons.end(), reason));
  }
  json Workload() { return fake_.Object(workload_); }
};

TEST_F(KueueLabelChangeTest, AWaitingJobMovedToAnotherQueueMovesItsWorkload) {
  Reconcile();
  const std::string uid = Workload()["metadata"]["uid"];
  ASSERT_EQ(Workload()["spec"]["queueName"], "team-queue");
  MoveTo("night-queue");
  Reconcile();
  json workload = Workload();
  EXPECT_EQ(workload["metadata"]["uid"], uid) << "the same Workload, not a new one";
  EXPECT_EQ(workload["spec"]["queueName"], "night-queue");
  EXPECT_EQ(workload["metadata"]["labels"][kQueueNameLabel], "night-queue");
  EXPECT_THAT(EventReasons(), Contains("UpdatedWorkload"));
  EXPECT_EQ(Job()["status"]["phase"], "Suspended");
  EXPECT_THAT(Job()["status"]["message"].get<std::string>(), ::testing::HasSubstr("night-queue"));

  // Admitted there, the job starts.
  fake_.SetStatus(workload_, Admitted("default"));
  Reconcile();
  EXPECT_THAT(Pods(), SizeIs(4));
}

TEST_F(KueueLabelChangeTest, AnAdmittedJobStaysInTheQueueThatAdmittedIt) {
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  MoveTo("night-queue");
  Reconcile();
  Reconcile();
  EXPECT_EQ(Workload()["spec"]["queueName"], "team-queue");
  EXPECT_THAT(Pods(), SizeIs(4));
  std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "QueueChangeIgnored"), 1);
  EXPECT_THAT(reasons, Not(Contains("UpdatedWorkload")));
}

// A queue name Kueue's schema refuses (a label value may have capitals, a
// queue name may not): the Workload stays, the job says so once, and the
// reconcile does not fail over and over.
TEST_F(KueueLabelChangeTest, AMoveTheServerRefusesIsSaidOnceAndTheJobWaitsWhereItWas) {
  Reconcile();
  MoveTo("Night_Queue");
  fake_.FailNext("PATCH", workload_, 2, 422);
  Reconcile();
  Reconcile();
  EXPECT_EQ(Workload()["spec"]["queueName"], "team-queue");
  std::vector<std::string> reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "QueueChangeIgnored"), 1);
  EXPECT_EQ(Job()["status"]["phase"], "Suspended");

  // Moved back, then again: said again.
  MoveTo("team-queue");
  Reconcile();
  MoveTo("night-queue");
  fake_.FailNext("PATCH", workload_, 1, 422);
  Reconcile();
  reasons = EventReasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "QueueChangeIgnored"), 2);
}

TEST_F(KueueLabelChangeTest, ANewPriorityClassIsTakenWithItsValue) {
  MakePriorityClass("low", 1);
  MakePriorityClass("high", 100);
  Label(kWorkloadPriorityClassLabel, "low");
  Reconcile();
  ASSERT_EQ(Workload()["spec"]["priority"], 1);
  const std::string uid = Workload()["metadata"]["uid"];
  Label(kWorkloadPriorityClassLabel, "high");
  Reconcile();
  json spec = Workload()["spec"];
  EXPECT_EQ(Workload()["metadata"]["uid"], uid) << "the same Workload, not a new one";
  EXPECT_EQ(spec["priorityClassName"], "high");
  EXPECT_EQ(spec["priority"], 100);
  EXPECT_EQ(spec["priorityClassSource"], kWorkloadPriorityClassSource);
  EXPECT_EQ(Count("UpdatedWorkload"), 1);

  // A class that is not there: said once; the Workload keeps its own, and
  // the reconcile fails so that it is retried (no change of the job's
  // would bring it back when the class is made).
  Label(kWorkloadPriorityClassLabel, "urgent");
  ReconcileResult result;
  EXPECT_FALSE(reconciler_->Reconcile(Job(), Pods(), &result).ok());
  EXPECT_FALSE(reconciler_->Reconcile(Job(), Pods(), &result).ok());
  EXPECT_EQ(Workload()["spec"]["priority"], 100);
  EXPECT_EQ(Count("PriorityChangeIgnored"), 1);
  MakePriorityClass("urgent", 1000);
  Reconcile();
  EXPECT_EQ(Workload()["spec"]["priority"], 1000) << "taken once it is there";

  // The label removed: the priority the job would have without it, here
  // none (no pods' class, no cluster default).
  fake_.Modify(kJob, {{"metadata", {{"labels", {{kWorkloadPriorityClassLabel, nullptr}}}}}});
  Reconcile();
  spec = Workload()["spec"];
  EXPECT_FALSE(spec.contains("priority")) << spec.dump();
  EXPECT_FALSE(spec.contains("priorityClassName")) << spec.dump();
  EXPECT_FALSE(spec.contains("priorityClassSource")) << spec.dump();
  EXPECT_EQ(Count("UpdatedWorkload"), 3);
}

// A Workload whose priority comes from its pods' PriorityClass keeps it, as
// in Kueue.
TEST_F(KueueLabelChangeTest, AWorkloadWithItsPodsPriorityClassKeepsIt) {
  fake_.Create("/apis/scheduling.k8s.io/v1/priorityclasses",
               {{"metadata", {{"name", "pods-high"}}}, {"value", 500}});
  fake_.Modify(kJob, {{"spec", {{"schedulingPolicy", {{"priorityClass", "pods-high"}}}}}});
  Reconcile();
  ASSERT_EQ(Workload()["spec"]["priorityClassName"], "pods-high");
  MakePriorityClass("low", 1);
  Label(kWorkloadPriorityClassLabel, "low");
  Reconcile();
  EXPECT_EQ(Workload()["spec"]["priorityClassName"], "pods-high");
  EXPECT_EQ(Workload()["spec"]["priority"], 500);
  EXPECT_EQ(Count("UpdatedWorkload"), 0);
}

}  // namespace
}  // namespace kubeps::kube::queued_job_test
