// A shard under a learning rate schedule (spec.optimizer.schedule): each
// update steps with the rate of its update count, and the shard's gauge
// kubeps_server_learning_rate says the rate of the last one.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

double GaugeValue(MetricsServer& metrics, const std::string& name) {
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].gauge.value;
  }
  ADD_FAILURE() << name << " is not registered";
  return -1;
}

TEST(ShardLearningRateTest, EachUpdateStepsWithItsRateAndTheGaugeSaysIt) {
  std::unique_ptr<MetricsServer> metrics;
  ASSERT_TRUE(MetricsServer::Start("127.0.0.1", -1, {}, &metrics).ok());
  ShardOptions options = shard_testing::PlainShardOptions(true, 1);
  options.optimizer.learning_rate = 1.0f;
  options.optimizer.schedule.warmup_steps = 4;  // rates 0.25, 0.5, 0.75, 1
  std::string error;
  Shard shard(options, MakeOptimizer(options.optimizer, &error), metrics.get());
  shard_testing::InitKeys(shard, {3}, 2, [](uint32_t, uint32_t) { return 0.0f; });
  const std::vector<float> gradient = {1.0f, -2.0f};
  float expected = 0.0f;
  for (uint64_t step = 0; step < 3; ++step) {
    PushData data(shard_testing::OnePiece(gradient));
    ASSERT_TRUE(shard.Push(shard_testing::PushOfKeys(0, step + 1, step, {3}, 2), data).ok());
    const float rate = 0.25f * static_cast<float>(step + 1);
    expected -= rate;
    EXPECT_EQ(shard.PartValue(3, 0), (std::vector<float>{expected, -2.0f * expected})) << step;
    EXPECT_DOUBLE_EQ(GaugeValue(*metrics, "kubeps_server_learning_rate"), rate) << step;
  }
}

}  // namespace
}  // namespace kubeps
