// The TrainingJob's typed status (api/training_job_status.h): what the
// operator writes reads back the same, and the condition helpers follow
// apimachinery's meta.SetStatusCondition.
#include "api/training_job_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::api {
namespace {

using nlohmann::json;

TrainingJobStatus FullStatus() {
  TrainingJobStatus s;
  s.phase = JobPhase::kRunning;
  s.message = "every replica is running";
  s.observed_generation = 3;
  SetPhaseCondition(&s.conditions, JobPhase::kCreated, "JobCreated", "starting", "t1");
  SetPhaseCondition(&s.conditions, JobPhase::kRunning, "JobRunning", "running", "t2");
  s.replica_statuses = {
      {"scheduler", {1, 0, 0, 0}}, {"ps", {2, 0, 0, 0}}, {"worker", {3, 1, 1, 2}}};
  s.workers = "4/4";
  s.start_time = "2026-01-02T03:04:05Z";
  s.step = 1234;
  s.steps_per_second = "12.5";
  return s;
}

// The operator compares the status it read with the one it would write, and
// writes only when they differ: whatever ToJson writes must read back equal.
TEST(TrainingJobStatusTest, ReadsBackWhatItWrites) {
  const TrainingJobStatus written = FullStatus();
  const json wire = json::parse(ToJson(written).dump());
  const TrainingJobStatus read = StatusFromJson(wire);
  EXPECT_EQ(read.replica_statuses, written.replica_statuses);
  EXPECT_EQ(read.conditions, written.conditions);
  EXPECT_EQ(read.step, written.step);
  EXPECT_TRUE(read.SameExceptTimes(written));
  EXPECT_EQ(ToJson(read), wire);
}

TEST(TrainingJobStatusTest, SameExceptTimesIgnoresOnlyTimeStamps) {
  TrainingJobStatus a = FullStatus(), b = FullStatus();
  for (Condition& c : b.conditions) c.last_update_time = c.last_transition_time = "later";
  EXPECT_TRUE(a.SameExceptTimes(b));
  b.replica_statuses["worker"].restarts = 3;
  EXPECT_FALSE(a.SameExceptTimes(b));
}

TEST(TrainingJobStatusTest, MissingOrMalformedStatusReadsAsDefaults) {
  for (const json& status : {json(nullptr), json::object(), json("text"),
                             json({{"replicaStatuses", {{"worker", "x"}}}, {"step", "x"}})}) {
    TrainingJobStatus s = StatusFromJson(status);
    EXPECT_FALSE(s.phase) << status;
    EXPECT_TRUE(s.replica_statuses.empty()) << status;
    EXPECT_FALSE(s.step) << status;
  }
}

// lastTransitionTime moves only when the status flips; lastUpdateTime when
// the reason or message changes; the other phases' conditions turn False.
TEST(TrainingJobStatusTest, PhaseConditionsFollowSetStatusCondition) {
  std::vector<Condition> conditions;
  SetPhaseCondition(&conditions, JobPhase::kRunning, "JobRunning", "running", "t1");
  SetPhaseCondition(&conditions, JobPhase::kRunning, "JobRunning", "still running", "t2");
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0].last_transition_time, "t1");
  EXPECT_EQ(conditions[0].last_update_time, "t2");
  SetPhaseCondition(&conditions, JobPhase::kRestarting, "ReplicaRestarted", "worker-0", "t3");
  const Condition* running = FindCondition(conditions, "Running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->status, "False");
  EXPECT_EQ(running->last_transition_time, "t3");
  EXPECT_EQ(FindCondition(conditions, "Restarting")->status, "True");
}

}  // namespace
}  // namespace kubeps::api
