// What the progress columns make of a worker's figures
// (api/training_progress.h), and the termination message a finished worker
// leaves them in.
#include "api/training_progress.h"

#include <gtest/gtest.h>

namespace kubeps::api {
namespace {

TEST(TrainingProgressTest, ProgressIsTheShareOfStepsDoneRoundedDown) {
  EXPECT_EQ(ProgressPercent(0, 1404), "0%");
  EXPECT_EQ(ProgressPercent(351, 1404), "25%");
  // 99.9% is not done yet: only the last step makes 100%.
  EXPECT_EQ(ProgressPercent(1403, 1404), "99%");
  EXPECT_EQ(ProgressPercent(1404, 1404), "100%");
  // A job resumed from checkpoints of a longer run does not go past 100%.
  EXPECT_EQ(ProgressPercent(2000, 1404), "100%");
}

TEST(TrainingProgressTest, ProgressIsUnknownWithoutATotal) {
  EXPECT_EQ(ProgressPercent(5, 0), "");
  EXPECT_EQ(ProgressPercent(-1, 10), "");
}

TEST(TrainingProgressTest, TimeLeftIsTheStepsLeftAtTheRate) {
  EXPECT_EQ(EstimatedTimeLeft(100, 1100, 10.0), "100s");
  EXPECT_EQ(EstimatedTimeLeft(0, 1404, 178.25), "8s");  // 7.88 s, rounded up
  EXPECT_EQ(EstimatedTimeLeft(0, 60000, 100.0), "10m");
  EXPECT_EQ(EstimatedTimeLeft(0, 3000, 10.0), "5m");
  EXPECT_EQ(EstimatedTimeLeft(0, 3020, 10.0), "5m2s");
  EXPECT_EQ(EstimatedTimeLeft(1404, 1404, 0.0), "0s");
  EXPECT_EQ(EstimatedTimeLeft(1404, 1404, 50.0), "0s");
}

TEST(TrainingProgressTest, TimeLeftIsUnknownWithoutARateOrATotal) {
  EXPECT_EQ(EstimatedTimeLeft(10, 100, 0.0), "");
  EXPECT_EQ(EstimatedTimeLeft(10, 100, -3.0), "");
  EXPECT_EQ(EstimatedTimeLeft(10, 0, 5.0), "");
}

// kubectl's own way with ages (apimachinery's duration.HumanDuration).
TEST(TrainingProgressTest, DurationsReadAsKubectlsAges) {
  EXPECT_EQ(HumanDuration(0), "0s");
  EXPECT_EQ(HumanDuration(119), "119s");
  EXPECT_EQ(HumanDuration(120), "2m");
  EXPECT_EQ(HumanDuration(200), "3m20s");
  EXPECT_EQ(HumanDuration(3 * 3600 + 60), "3h1m");
  EXPECT_EQ(HumanDuration(8 * 3600 + 60), "8h");
  EXPECT_EQ(HumanDuration(3 * 86400 + 4 * 3600), "3d4h");
  EXPECT_EQ(HumanDuration(30 * 86400), "30d");
  EXPECT_EQ(HumanDuration(-5), "0s");
}

TEST(TrainingProgressTest, SummaryReadsBackWhatAWorkerWrites) {
  TrainingSummary written;
  written.step = 1404;
  written.total_steps = 1404;
  written.steps_per_second = 178.25;
  written.loss = 0.37204;
  written.test_accuracy = 0.8665;
  const std::string message = FormatTrainingSummary(written);
  EXPECT_EQ(message,
            "step=1404 totalSteps=1404 stepsPerSecond=178.25 loss=0.3720 testAccuracy=0.8665");
  std::optional<TrainingSummary> read = ParseTrainingSummary(message);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->step, 1404);
  EXPECT_EQ(read->total_steps, 1404);
  EXPECT_DOUBLE_EQ(*read->steps_per_second, 178.25);
  EXPECT_DOUBLE_EQ(*read->loss, 0.372);
  EXPECT_DOUBLE_EQ(*read->test_accuracy, 0.8665);
}

// Workers other than 0 do not evaluate: their summary has no accuracy.
TEST(TrainingProgressTest, SummaryWithoutAccuracyHasNone) {
  std::optional<TrainingSummary> read = ParseTrainingSummary("step=100 totalSteps=100 loss=0.5");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->step, 100);
  EXPECT_FALSE(read->test_accuracy);
  EXPECT_FALSE(read->steps_per_second);
}

TEST(TrainingProgressTest, OtherMessagesAreNoSummary) {
  for (const char* message :
       {"", "the loss of step 3 is nan", "step=12", "totalSteps=12", "step=x totalSteps=12",
        "step=-1 totalSteps=12", "step=3 totalSteps=inf"}) {
    EXPECT_FALSE(ParseTrainingSummary(message)) << message;
  }
}

}  // namespace
}  // namespace kubeps::api
