// A job held (evicted by Kueue, or suspended) waits for its pods to be
// gone, and a queued one gives its quota back only then. One on a lost node
// stays Terminating, as only that node's kubelet could end it: it is
// force-deleted as on a running job's path (stranded_pods.h). And pods it
// deleted before the cache showed them are no longer expected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/queued_job_fixture.h"

namespace kubeps::kube::queued_job_test {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;

class HeldJobTest : public QueuedJobTest {
 protected:
  // Every pod gone but server-0, Terminating since long ago on a node that
  // stopped reporting.
  void StrandServer0() {
    Reconcile();  // the pods running, as the cache shows them
    fake_.Create("/api/v1/nodes", {{"metadata", {{"name", "n1"}}}});
    fake_.SetStatus(
        "/api/v1/nodes/n1",
        {{"conditions",
          {{{"type", "Ready"}, {"status", "Unknown"}, {"reason", "NodeStatusUnknown"}}}}});
    for (const json& pod : Pods()) {
      const std::string name = pod["metadata"]["name"];
      if (name != "mnist-server-0") fake_.Remove(kPods_ + "/" + name);
    }
    fake_.Modify(kPods_ + "/mnist-server-0",
                 {{"metadata", {{"deletionTimestamp", "2020-01-01T00:00:00Z"}}},
                  {"spec", {{"nodeName", "n1"}}}});
  }
};

TEST_F(HeldJobTest, AnEvictedJobsPodOnALostNodeIsForceDeletedAndItsQuotaGivenBack) {
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  StrandServer0();
  fake_.SetStatus(workload_,
                  WithCondition(fake_.Object(workload_), "Evicted", true, "PodsReadyTimeout",
                                "Exceeded the PodsReady timeout", "t1")["status"]);
  Reconcile();
  EXPECT_THAT(EventReasons(), Contains("ForceDeletedPod"));
  EXPECT_THAT(Pods(), IsEmpty());
  Reconcile();
  EXPECT_FALSE(fake_.Object(workload_)["status"].contains("admission")) << "the quota given back";
}

TEST_F(HeldJobTest, ASuspendedJobsPodOnALostNodeIsForceDeleted) {
  ASSERT_NO_FATAL_FAILURE(RunAdmitted());
  StrandServer0();
  Suspend(true);
  Reconcile();
  EXPECT_THAT(EventReasons(), Contains("ForceDeletedPod"));
  EXPECT_THAT(Pods(), IsEmpty());
}

// Evicted before the cache showed the pods just made: those deleted are
// expected no more, so the quota goes back once the cache shows none,
// not half a minute later when the expectations would lapse.
TEST_F(HeldJobTest, PodsDeletedBeforeTheCacheShowedThemHoldNothingBack) {
  Reconcile();
  fake_.SetStatus(workload_, Admitted("default"));
  ReconcileResult result;
  ASSERT_TRUE(reconciler_->Reconcile(Job(), {}, &result).ok());
  ASSERT_THAT(Pods(), ::testing::SizeIs(4));
  fake_.SetStatus(workload_, WithCondition(fake_.Object(workload_), "Evicted", true, "Preempted",
                                           "Preempted to accommodate a higher priority Workload",
                                           "t1")["status"]);
  ASSERT_TRUE(reconciler_->Reconcile(Job(), {}, &result).ok());
  EXPECT_THAT(Pods(), IsEmpty());
  ASSERT_TRUE(reconciler_->Reconcile(Job(), {}, &result).ok());
  EXPECT_FALSE(fake_.Object(workload_)["status"].contains("admission")) << "the quota given back";
}

}  // namespace
}  // namespace kubeps::kube::queued_job_test
