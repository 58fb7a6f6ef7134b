// A job moved to another queue (its kueue.x-k8s.io/queue-name label
// changed) while its Workload waits moves the Workload there, as Kueue's own
// job integrations do for a suspended job: a label change bumps no
// generation, so nothing else would. An admitted job stays where Kueue
// admitted it (Kueue's webhooks refuse the change for a running job; here
// an Event says it was not followed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

using ::testing::Contains;
using ::testing::Not;
using ::testing::SizeIs;

class QueueChangeTest : public QueuedJobTest {
 protected:
  void MoveTo(const std::string& queue) {
    fake_.Modify(kJob, {{"metadata", {{"labels", {{kQueueNameLabel, queue}}}}}});
  }
  json Workload() { return fake_.Object(workload_); }
};

TEST_F(QueueChangeTest, AWaitingJobMovedToAnotherQueueMovesItsWorkload) {
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

TEST_F(QueueChangeTest, AnAdmittedJobStaysInTheQueueThatAdmittedIt) {
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
TEST_F(QueueChangeTest, AMoveTheServerRefusesIsSaidOnceAndTheJobWaitsWhereItWas) {
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

}  // namespace
}  // namespace kubeps::kube::queued_job_test
