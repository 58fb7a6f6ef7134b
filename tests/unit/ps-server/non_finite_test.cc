// NaN and Inf gradients at a shard (ShardOptions::non_finite): Fail (the
// default) refuses the push with INVALID_ARGUMENT naming the worker and the
// tensor key, and leaves no trace (not applied, not recorded as applied,
// nothing half-gathered); SkipStep accepts it once, skips the update it
// belongs to (sync: the step still completes, so no worker waits forever)
// and counts it; with optimizer none it hands the mean on as it is, for the
// workers' own optimizer to skip.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using shard_testing::Bytes;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<Shard> MakeShard(bool sync, int num_workers, bool skip = false,
                                 const std::string& optimizer = "sgd") {
  ShardOptions options = shard_testing::PlainShardOptions(sync, num_workers);
  if (skip) options.non_finite = NonFinitePolicy::kSkipStep;
  options.optimizer.name = optimizer;
  return shard_testing::MakeShard(options);
}

void Init(Shard& shard, const std::vector<uint32_t>& keys) {
  shard_testing::InitKeys(shard, keys, 3, [](uint32_t, uint32_t i) { return i + 1.0f; });
}

// A push of 3 floats per key, cut into pieces of 5 bytes so that floats
// straddle pieces as they do in gRPC's slices.
grpc::Status Push(Shard& shard, int rank, uint64_t seq, uint64_t step,
                  const std::vector<uint32_t>& keys, const std::vector<float>& grad) {
  v1::PushRequest request = shard_testing::PushOfKeys(rank, seq, step, keys, 3);
  const std::string bytes = Bytes(grad);
  PushData data(shard_testing::CutInto(bytes, 5));
  return shard.Push(request, data);
}

TEST(NonFiniteTest, FailRefusesANaNPushNamingWorkerAndKeyAndLeavesNoTrace) {
  auto shard = MakeShard(true, 2);
  Init(*shard, {0, 7});
  // Key 0 is finite, key 7 holds the NaN: nothing of the push may stay.
  grpc::Status s = Push(*shard, 1, 0, 0, {0, 7}, {1, 1, 1, 1, kNaN, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("worker-1 (rank 1)"));
  EXPECT_THAT(s.error_message(), HasSubstr("key 7"));
  EXPECT_THAT(s.error_message(), HasSubstr("not finite"));
  EXPECT_EQ(shard->dedup().TrackedRequests(), 0u) << "a refused push was recorded as applied";
  // Worker 0's push alone must not complete the step: worker 1's refused
  // gradient for key 0 was not gathered.
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0, 7}, {2, 2, 2, 2, 2, 2}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
  // The worker's corrected push (same id: a resend) is applied.
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0, 7}, {4, 4, 4, 4, 4, 4}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-2, -1, 0}));
  EXPECT_EQ(shard->PartValue(7, 0), (std::vector<float>{-2, -1, 0}));
}

// The step's last push is added to the others as it is read (Shard::
// GatherLast): a NaN found there must leave the gradients already gathered
// as they were, so that the corrected push completes the step exactly.
TEST(NonFiniteTest, FailRefusesANaNInTheStepsLastPushAndKeepsTheOthers) {
  auto shard = MakeShard(true, 3);
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 2, 0, 0, {0}, {6, 6, 6}).ok());
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, {3, 3, 3}).ok());
  grpc::Status s = Push(*shard, 1, 0, 0, {0}, {1, 1, kNaN});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(shard->PartVersion(0, 0), 0u) << "the step completed with a refused gradient";
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0}, {0, 3, 6}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  // SGD with learning rate 1: w - (g0 + g1 + g2) / 3.
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-2, -2, -2}));
}

// The same push in one piece, as through shared memory: the step's last
// push is then summed from where it lies (PushData::View).
grpc::Status PushInOnePiece(Shard& shard, int rank, uint64_t seq, uint64_t step,
                            const std::vector<uint32_t>& keys, const std::vector<float>& grad) {
  v1::PushRequest request = shard_testing::PushOfKeys(rank, seq, step, keys, 3);
  PushData data(shard_testing::OnePiece(grad));
  return shard.Push(request, data);
}

TEST(NonFiniteTest, FailRefusesANaNInTheStepsLastPushReadInPlace) {
  auto shard = MakeShard(true, 2);
  Init(*shard, {0, 1});
  ASSERT_TRUE(PushInOnePiece(*shard, 0, 0, 0, {0, 1}, {3, 3, 3, 1, 1, 1}).ok());
  grpc::Status s = PushInOnePiece(*shard, 1, 0, 0, {0, 1}, {1, 1, 1, 1, kInf, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(shard->PartVersion(0, 0), 0u) << "the step completed with a refused gradient";
  ASSERT_TRUE(PushInOnePiece(*shard, 1, 0, 0, {0, 1}, {1, 2, 3, 1, 2, 3}).ok());
  // SGD with learning rate 1: w - (g0 + g1) / 2.
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-1, -0.5f, 0}));
  EXPECT_EQ(shard->PartValue(1, 0), (std::vector<float>{0, 0.5f, 1}));
}

TEST(NonFiniteTest, FailRefusesInfInAsyncMode) {
  auto shard = MakeShard(false, 1);
  Init(*shard, {0, 7});
  grpc::Status s = Push(*shard, 0, 0, 0, {0, 7}, {1, 1, 1, 1, 1, -kInf});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("worker-0 (rank 0)"));
  EXPECT_THAT(s.error_message(), HasSubstr("key 7"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3})) << "half the push applied";
  EXPECT_EQ(shard->PartValue(7, 0), (std::vector<float>{1, 2, 3}));
}

TEST(NonFiniteTest, SkipStepCompletesTheSyncStepWithoutUpdating) {
  auto shard = MakeShard(true, 2, true);
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, {1, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0}, {kNaN, 1, 1}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u) << "the step did not complete: workers would hang";
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3})) << "the step was applied";
  // Exactly once: the resent NaN push is a duplicate, the next step is normal.
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0}, {kNaN, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 0, 1, 1, {0}, {1, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 1, 1, 1, {0}, {3, 3, 3}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-1, 0, 1}));
}

TEST(NonFiniteTest, SkipStepDropsAnAsyncPush) {
  auto shard = MakeShard(false, 1, true);
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, {1, kInf, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(Push(*shard, 0, 1, 0, {0}, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{0, 1, 2}));
}

// With optimizer none the workers' own optimizer applies the mean, so the
// choice to skip is theirs (a GradScaler's overflow): the shard hands the
// mean on, NaN and Inf included, and every worker reads the same one. The
// values of the step before would be a gradient applied twice.
TEST(NonFiniteTest, SkipStepWithOptimizerNoneHandsTheMeanOnNotTheStepBefore) {
  auto shard = MakeShard(true, 2, true, "none");
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, {2, 4, 6}).ok());
  ASSERT_TRUE(Push(*shard, 1, 0, 0, {0}, {4, 4, 4}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{3, 4, 5}));
  ASSERT_TRUE(Push(*shard, 0, 1, 1, {0}, {1, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 1, 1, 1, {0}, {kInf, 1, 3}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  const std::vector<float> mean = shard->PartValue(0, 0);
  ASSERT_EQ(mean.size(), 3u);
  EXPECT_TRUE(std::isinf(mean[0])) << "the overflow was hidden from the workers: " << mean[0];
  EXPECT_EQ(mean[1], 1);
  EXPECT_EQ(mean[2], 2);
}

TEST(NonFiniteTest, SkipStepWithOptimizerNoneHandsAnAsyncPushOn) {
  auto shard = MakeShard(false, 1, true, "none");
  Init(*shard, {0});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, {0}, {1, kNaN, 1}).ok());
  const std::vector<float> value = shard->PartValue(0, 0);
  ASSERT_EQ(value.size(), 3u);
  EXPECT_TRUE(std::isnan(value[1])) << "the last push was not handed on";
}

// Fail still refuses: a job that does not skip fails at the first NaN.
TEST(NonFiniteTest, FailWithOptimizerNoneStillRefuses) {
  auto shard = MakeShard(true, 1, false, "none");
  Init(*shard, {0});
  EXPECT_EQ(Push(*shard, 0, 0, 0, {0}, {1, kNaN, 1}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(NonFiniteTest, FiniteExtremesAreAccepted) {
  auto shard = MakeShard(false, 1);
  Init(*shard, {0});
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(Push(*shard, 0, 0, 0, {0}, {big, -big, tiny}).ok());
}
}  // namespace
}  // namespace kubeps
