// A shard of an elastic job: each push says how many workers its step has
// and its share of the step's examples (common/membership.h), so the number
// of contributions a step waits for changes with the membership, and
// unequal shares weight the mean. SGD with learning rate 1: new value = old
// value - mean gradient.
#include <unistd.h>

#include <filesystem>
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

constexpr int kSlots = 4;  // elasticPolicy.maxReplicas

grpc::Status Push(Shard& shard, int rank, uint64_t step, const std::vector<float>& grad,
                  uint32_t contributors, uint32_t share, uint32_t global_batch) {
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-" + std::to_string(rank));
  request.mutable_id()->set_incarnation(1);
  request.mutable_id()->set_seq(step);
  request.set_worker_rank(rank);
  request.set_step(step);
  auto* part = request.add_parts();
  part->set_length(grad.size());
  request.set_contributors(contributors);
  request.set_share(share);
  request.set_global_batch(global_batch);
  const std::string bytes = Bytes(grad);
  std::vector<std::string_view> pieces{bytes};
  PushData data(pieces, GradientEncoding::kFloat32, 0);
  return shard.Push(request, data);
}

std::unique_ptr<Shard> InitializedShard(
    const std::vector<float>& values,
    const ShardOptions& options = shard_testing::PlainShardOptions(true, kSlots)) {
  auto shard = shard_testing::MakeShard(options);
  v1::InitRequest init;
  init.mutable_id()->set_node_id("worker-0");
  auto* part = init.add_parts();
  part->set_length(values.size());
  init.set_data(Bytes(values));
  v1::InitResponse response;
  EXPECT_TRUE(shard->Init(init, &response).ok());
  return shard;
}

TEST(ElasticShardTest, EachStepWaitsForTheWorkersItsPushesName) {
  auto shard = InitializedShard({10, 10});
  // Step 0: two workers, each half of 8 examples.
  ASSERT_TRUE(Push(*shard, 0, 0, {2, 4}, 2, 4, 8).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
  ASSERT_TRUE(Push(*shard, 1, 0, {4, 8}, 2, 4, 8).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{7, 4}));
  // Step 1: rank 1 alone (scaled down), all 8 examples.
  ASSERT_TRUE(Push(*shard, 1, 1, {1, 1}, 1, 8, 8).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{6, 3}));
  // Step 2: ranks 0, 1 and 3 (scaled up; rank 2 never came).
  ASSERT_TRUE(Push(*shard, 3, 2, {3, 3}, 3, 2, 6).ok());
  ASSERT_TRUE(Push(*shard, 0, 2, {3, 3}, 3, 2, 6).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  ASSERT_TRUE(Push(*shard, 1, 2, {0, 3}, 3, 2, 6).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{4, 0}));
}

TEST(ElasticShardTest, UnequalSharesWeightTheMeanByTheirExamples) {
  auto shard = InitializedShard({0});
  // 10 examples over three workers: 3, 3 and 4. Each gradient is the mean
  // over its own examples; the step's is the mean over all ten.
  ASSERT_TRUE(Push(*shard, 0, 0, {1}, 3, 3, 10).ok());
  ASSERT_TRUE(Push(*shard, 1, 0, {2}, 3, 3, 10).ok());
  ASSERT_TRUE(Push(*shard, 2, 0, {10}, 3, 4, 10).ok());
  // (3*1 + 3*2 + 4*10) / 10 = 4.9; the unweighted mean would be 4.333.
  EXPECT_FLOAT_EQ(shard->PartValue(0, 0)[0], -4.9f);
}

TEST(ElasticShardTest, PushesThatDisagreeOnTheStepsWorkersAreRefused) {
  auto shard = InitializedShard({0});
  ASSERT_TRUE(Push(*shard, 0, 0, {1}, 3, 2, 6).ok());
  grpc::Status s = Push(*shard, 1, 0, {1}, 2, 3, 6);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("says step 0 has 2 workers, earlier pushes said 3"));
  s = Push(*shard, 1, 0, {1}, kSlots + 1, 1, 6);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("contributors 5 (at most 4)"));
  // A count no int holds is as far out of range, not a negative one.
  s = Push(*shard, 1, 0, {1}, 0x80000000u, 1, 6);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("contributors 2147483648 (at most 4)"));
  EXPECT_EQ(Push(*shard, 1, 0, {1}, 3, 7, 6).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << "a share larger than the global batch";
}

// A job run again with another spec.batchSize asks for a new global batch
// (scheduler_recovery.cc): each checkpoint records the batchSize of the job
// whose global batch it holds, and a shard that loads one says that.
TEST(ElasticShardTest, ACheckpointRecordsTheBatchSizeOfTheJobWhoseGlobalBatchItHolds) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kubeps-batch-size-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  ShardOptions options = shard_testing::PlainShardOptions(true, kSlots);
  options.checkpoint_dir = dir;
  options.batch_size = 4;
  {
    auto shard = InitializedShard({10, 10}, options);
    EXPECT_EQ(shard->StateBatchSize(), 0u) << "no push yet: no global batch";
    ASSERT_TRUE(Push(*shard, 0, 0, {2, 4}, 2, 4, 8).ok());
    ASSERT_TRUE(Push(*shard, 1, 0, {4, 8}, 2, 4, 8).ok());
    EXPECT_EQ(shard->StateBatchSize(), 4u);
    ASSERT_TRUE(shard->WriteFinalCheckpoint().ok());
  }
  options.batch_size = 2;  // the job run again with a smaller batch
  auto loaded = shard_testing::MakeShard(options);
  int64_t step = -1;
  ASSERT_TRUE(loaded->LoadLatestCheckpoint(&step).ok());
  EXPECT_EQ(step, 1);
  EXPECT_EQ(loaded->GlobalBatch(), 8u);
  EXPECT_EQ(loaded->StateBatchSize(), 4u) << "the batchSize of the job that wrote it";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubeps
