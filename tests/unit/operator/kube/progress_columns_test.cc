// The Step, Steps/s, Progress and Loss columns of a running job come from
// worker 0's metrics, probed at most every 5 s. A probe that gets no
// answer (the pod's IP not reachable: a NetworkPolicy, a node gone) waits
// up to 300 ms in the reconcile: it must not be tried again on every
// reconcile, or each of the job's changes costs every other job that wait.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kube/job_reconciler_fixture.h"

namespace kubeps::kube::reconciler_test {
namespace {

class ProgressColumnsTest : public JobReconcilerTest {
 protected:
  ProgressColumnsTest() {
    reconciler_->ProbeProgressWith([this](const std::string& host, int) {
      probed_.push_back(host);
      return answer_;
    });
  }
  // Every pod running, worker 0 at 10.0.0.7.
  void RunJob() {
    CreateJob();
    ASSERT_TRUE(Reconcile().ok());
    for (const auto& name : kPodNames) {
      json status = {{"phase", "Running"}};
      if (name == "mnist-worker-0") status["podIP"] = "10.0.0.7";
      ASSERT_FALSE(fake_.SetStatus(kPodsPath + "/" + name, status).is_null());
    }
  }

  std::optional<WorkerProgress> answer_;
  std::vector<std::string> probed_;
};

TEST_F(ProgressColumnsTest, AWorkerThatDoesNotAnswerIsNotProbedOnEveryReconcile) {
  ASSERT_NO_FATAL_FAILURE(RunJob());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(probed_, std::vector<std::string>{"10.0.0.7"});
  EXPECT_FALSE(StatusOfJob().contains("step")) << StatusOfJob().dump();
}

TEST_F(ProgressColumnsTest, AWorkerThatAnswersGivesTheJobItsStep) {
  ASSERT_NO_FATAL_FAILURE(RunJob());
  answer_ = WorkerProgress{120, 1000, 0.25};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(probed_.size(), 1u);
  json status = StatusOfJob();
  EXPECT_EQ(status.value("step", int64_t{0}), 120) << status.dump();
  EXPECT_EQ(status.value("totalSteps", int64_t{0}), 1000) << status.dump();
}

}  // namespace
}  // namespace kubeps::kube::reconciler_test
