// The TrainingJob's typed status (api/training_job_status.h): what the
// operator writes reads back the same, and the condition helpers follow
// apimachinery's meta.SetStatusCondition.
#include "api/training_job_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

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
  s.total_steps = 2808;
  s.steps_per_second = "12.5";
  s.progress = "43%";
  s.eta = "2m";
  s.loss = "0.4321";
  s.test_accuracy = "0.8665";
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
  EXPECT_EQ(read.total_steps, written.total_steps);
  EXPECT_EQ(read.progress, "43%");
  EXPECT_EQ(read.eta, "2m");
  EXPECT_EQ(read.loss, "0.4321");
  EXPECT_EQ(read.test_accuracy, "0.8665");
  EXPECT_EQ(wire["totalSteps"], 2808);
  EXPECT_EQ(wire["testAccuracy"], "0.8665");
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

// A new figure is a change worth writing, or the columns would lag.
TEST(TrainingJobStatusTest, EveryProgressFigureIsAChange) {
  const TrainingJobStatus base = FullStatus();
  const std::vector<void (*)(TrainingJobStatus*)> changes = {
      [](TrainingJobStatus* s) { s->total_steps = 100; },
      [](TrainingJobStatus* s) { s->progress = "44%"; },
      [](TrainingJobStatus* s) { s->eta = "1m"; }, [](TrainingJobStatus* s) { s->loss = "0.4000"; },
      [](TrainingJobStatus* s) { s->test_accuracy = ""; }};
  for (size_t i = 0; i < changes.size(); ++i) {
    TrainingJobStatus changed = base;
    changes[i](&changed);
    EXPECT_FALSE(base.SameExceptTimes(changed)) << "change " << i;
  }
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

// A job that has run stays Running while a pod of it is made again; one
// suspended (or queued again by Kueue) and resumed has not run since, though
// its conditions still hold the Running of before (only turned False).
TEST(TrainingJobStatusTest, AJobResumedHasNotRunUntilItRunsAgain) {
  TrainingJobStatus s;
  auto phase = [&s](JobPhase p, const std::string& at) {
    s.phase = p;
    SetPhaseCondition(&s.conditions, p, "", "", at);
  };
  s.start_time = "2026-12-07T10:00:00Z";
  phase(JobPhase::kCreated, "2026-12-07T10:00:00Z");
  EXPECT_FALSE(s.HasRun());
  phase(JobPhase::kRunning, "2026-12-07T10:00:05Z");
  EXPECT_TRUE(s.HasRun());
  phase(JobPhase::kRestarting, "2026-12-07T10:01:00Z");
  EXPECT_TRUE(s.HasRun());

  phase(JobPhase::kSuspended, "2026-12-07T10:02:00Z");
  s.start_time.clear();
  EXPECT_FALSE(s.HasRun());
  s.start_time = "2026-12-07T10:03:00Z";  // resumed
  phase(JobPhase::kCreated, "2026-12-07T10:03:00Z");
  phase(JobPhase::kRestarting, "2026-12-07T10:03:10Z");  // a pod failed before it ran
  EXPECT_FALSE(s.HasRun());
  phase(JobPhase::kRunning, "2026-12-07T10:03:20Z");
  phase(JobPhase::kRestarting, "2026-12-07T10:04:00Z");
  EXPECT_TRUE(s.HasRun());
}

// Times are compared as times, not as text: a status written by another
// client may carry fractions of a second or an offset (both RFC 3339).
TEST(TrainingJobStatusTest, HasRunComparesTimesNotTheirText) {
  TrainingJobStatus s;
  s.phase = JobPhase::kRestarting;
  s.start_time = "2026-12-07T10:00:00Z";
  SetPhaseCondition(&s.conditions, JobPhase::kRunning, "", "", "2026-12-07T10:00:00.5Z");
  s.conditions.back().status = "False";
  EXPECT_TRUE(s.HasRun()) << "half a second after the start";
  s.conditions.back().last_transition_time = "2026-12-07T11:00:00+02:00";
  EXPECT_FALSE(s.HasRun()) << "an hour before the start";
}

}  // namespace
}  // namespace kubeps::api
