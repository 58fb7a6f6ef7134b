// Where a replica's last words go (common/termination_message.h): the file
// the local runner names, else the pod's default file where the process runs
// in a pod, else nowhere, so that a process run by hand on a host where
// something made /dev/termination-log leaves nothing in it.
#include "common/termination_message.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace kubeps {
namespace {

constexpr const char* kInPod = "KUBERNETES_SERVICE_HOST";

class TerminationLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {kTerminationLogVariable, kInPod}) {
      const char* value = getenv(name);
      saved_.push_back({name, value ? std::optional<std::string>(value) : std::nullopt});
      unsetenv(name);
    }
    char pattern[] = "/tmp/kubeps-termination-log-XXXXXX";
    const int fd = mkstemp(pattern);
    ASSERT_GE(fd, 0);
    close(fd);
    pod_default_ = pattern;  // stands for /dev/termination-log, which the kubelet made
  }
  void TearDown() override {
    unlink(pod_default_.c_str());
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }
  std::string pod_default_;
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(TerminationLogTest, OutsideAPodTheDefaultFileIsNotUsedEvenWhereItExists) {
  EXPECT_EQ(TerminationLogPath(pod_default_.c_str()), "");
}

TEST_F(TerminationLogTest, InAPodTheDefaultFileIsUsedWhereTheKubeletMadeIt) {
  setenv(kInPod, "10.96.0.1", 1);
  EXPECT_EQ(TerminationLogPath(pod_default_.c_str()), pod_default_);
  unlink(pod_default_.c_str());
  EXPECT_EQ(TerminationLogPath(pod_default_.c_str()), "") << "a pod whose kubelet made none";
}

TEST_F(TerminationLogTest, TheFileTheRunnerNamesWinsAndReceivesTheMessage) {
  const std::string named = pod_default_ + ".named";
  setenv(kTerminationLogVariable, named.c_str(), 1);
  setenv(kInPod, "10.96.0.1", 1);
  EXPECT_EQ(TerminationLogPath(pod_default_.c_str()), named);
  WriteTerminationMessage("JobOver", "every worker finished");
  std::ifstream in(named);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "JobOver: every worker finished\n");
  unlink(named.c_str());
}

// Every replica that hears the scheduler stop the job for a reason no
// restart cures ends with that reason, so the job fails at once whichever
// replica's end comes first; other stops keep the replica's own reason.
TEST(JobStopReasonTest, AnIncurableStopIsEveryonesReasonAndOthersKeepTheirOwn) {
  EXPECT_STREQ(JobStopReason(kReasonNoCommonCheckpoint, kReasonJobStopped),
               kReasonNoCommonCheckpoint);
  EXPECT_STREQ(JobStopReason("", kReasonJobStopped), kReasonJobStopped);
  const std::string said = JobStoppedMessage(kReasonNoCommonCheckpoint, "no step in common");
  EXPECT_EQ(said, "the scheduler stopped the job (NoCommonCheckpoint): no step in common");
  EXPECT_STREQ(JobStopReason("SomethingElse", kReasonTrainingFailed), kReasonTrainingFailed);
  // The reason travels beside the words (Status::reason), through every
  // caller that adds where it happened, not found again in them.
  const Status stopped = Status::Error(said).WithReason(kReasonNoCommonCheckpoint);
  const Status wrapped = stopped.Prefixed("step 12: ");
  EXPECT_EQ(wrapped.message(), "step 12: " + said);
  EXPECT_STREQ(JobStopReason(wrapped.reason(), kReasonTrainingFailed), kReasonNoCommonCheckpoint);
  EXPECT_STREQ(JobStopReason(Status::Error("step 12: " + said).reason(), kReasonTrainingFailed),
               kReasonTrainingFailed)
      << "words that look like a stop are not one";
}

// A worker the scheduler refused or replaced ends with that reason, its
// own, not the job's; neither is a stop that fails the job for everyone.
TEST(JobStopReasonTest, ARefusedOrReplacedWorkerEndsWithItsOwnReason) {
  EXPECT_STREQ(EndReason(kReasonJoinFailed, kReasonTrainingFailed), kReasonJoinFailed);
  EXPECT_STREQ(EndReason(kReasonReplaced, kReasonTrainingFailed), kReasonReplaced);
  EXPECT_STREQ(EndReason(kReasonProgramStateMissing, kReasonTrainingFailed),
               kReasonProgramStateMissing);
  EXPECT_STREQ(EndReason("", kReasonTrainingFailed), kReasonTrainingFailed);
  EXPECT_EQ(JobStopReason(kReasonReplaced, nullptr), nullptr);
  EXPECT_EQ(JobStopReason(kReasonJoinFailed, nullptr), nullptr);
}

}  // namespace
}  // namespace kubeps
