// The learning rate schedule of the servers' optimizers (common/optimizer.h,
// LearningRateAt): a linear warmup, then a cosine or linear decay to a floor,
// as a function of the part's update count; and the optimizers stepping with
// the rate of their update. Expected values are literals or the formula in
// double precision, written out here.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer.h"

namespace kubeps {
namespace {

constexpr double kPi = 3.14159265358979323846;

OptimizerConfig Scheduled(const char* name, float peak, uint64_t warmup, const char* decay,
                          uint64_t decay_steps, float floor) {
  OptimizerConfig config;
  config.name = name;
  config.learning_rate = peak;
  config.schedule = {warmup, decay, decay_steps, floor};
  return config;
}

TEST(LearningRateScheduleTest, WithoutOneEveryUpdateHasTheLearningRateItself) {
  OptimizerConfig config;
  config.learning_rate = 0.3f;
  for (uint64_t update : {1u, 2u, 1000u, 1000000u}) {
    EXPECT_EQ(LearningRateAt(config, update), 0.3f) << update;
  }
}

TEST(LearningRateScheduleTest, WarmupRisesLinearlyToThePeak) {
  const OptimizerConfig config = Scheduled("sgd", 0.8f, 4, "none", 0, 0.0f);
  const std::vector<float> expected = {0.2f, 0.4f, 0.6f, 0.8f, 0.8f, 0.8f};
  for (uint64_t update = 1; update <= expected.size(); ++update) {
    EXPECT_FLOAT_EQ(LearningRateAt(config, update), expected[update - 1]) << update;
  }
}

TEST(LearningRateScheduleTest, CosineDecaysAfterTheWarmupToTheFloorAndStaysThere) {
  const OptimizerConfig config = Scheduled("adam", 1.0f, 2, "cosine", 4, 0.1f);
  EXPECT_FLOAT_EQ(LearningRateAt(config, 1), 0.5f);
  EXPECT_FLOAT_EQ(LearningRateAt(config, 2), 1.0f);
  for (uint64_t into = 1; into <= 4; ++into) {
    const double expected = 0.1 + 0.9 * 0.5 * (1.0 + std::cos(kPi * static_cast<double>(into) / 4));
    EXPECT_FLOAT_EQ(LearningRateAt(config, 2 + into), static_cast<float>(expected)) << into;
  }
  EXPECT_EQ(LearningRateAt(config, 6), 0.1f);
  EXPECT_EQ(LearningRateAt(config, 1000), 0.1f);
}

TEST(LearningRateScheduleTest, LinearDecayWithoutWarmupStartsBelowThePeak) {
  const OptimizerConfig config = Scheduled("sgd", 1.0f, 0, "linear", 4, 0.0f);
  const std::vector<float> expected = {0.75f, 0.5f, 0.25f, 0.0f, 0.0f};
  for (uint64_t update = 1; update <= expected.size(); ++update) {
    EXPECT_FLOAT_EQ(LearningRateAt(config, update), expected[update - 1]) << update;
  }
}

TEST(LearningRateScheduleTest, SgdStepsWithTheRateOfEachUpdate) {
  const OptimizerConfig config = Scheduled("sgd", 0.5f, 2, "none", 0, 0.0f);
  std::string error;
  std::unique_ptr<Optimizer> sgd = MakeOptimizer(config, &error);
  ASSERT_NE(sgd, nullptr) << error;
  std::vector<float> w = {1.0f, -2.0f};
  const std::vector<float> g = {1.0f, 0.5f};
  OptimizerState state;
  sgd->Apply(w.data(), g.data(), w.size(), &state);  // rate 0.25
  EXPECT_EQ(w, (std::vector<float>{0.75f, -2.125f}));
  sgd->Apply(w.data(), g.data(), w.size(), &state);  // rate 0.5
  EXPECT_EQ(w, (std::vector<float>{0.25f, -2.375f}));
}

TEST(LearningRateScheduleTest, AdamsFirstStepInAWarmupIsTheScaledStep) {
  // Adam's first update moves each weight by about the rate (m / sqrt(v) = sign(g)).
  std::string error;
  std::unique_ptr<Optimizer> warm = MakeOptimizer(Scheduled("adam", 0.1f, 4, "none", 0, 0), &error);
  std::unique_ptr<Optimizer> peak = MakeOptimizer(Scheduled("adam", 0.1f, 0, "none", 0, 0), &error);
  ASSERT_NE(warm, nullptr) << error;
  const std::vector<float> start = {1.0f, -2.0f};
  std::vector<float> a = start, b = start;
  const std::vector<float> g = {0.5f, -4.0f};
  OptimizerState sa, sb;
  warm->Apply(a.data(), g.data(), a.size(), &sa);  // rate 0.025
  peak->Apply(b.data(), g.data(), b.size(), &sb);  // rate 0.1
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_NEAR(start[i] - a[i], 0.25 * (start[i] - b[i]), 1e-6) << i;
  }
}

}  // namespace
}  // namespace kubeps
