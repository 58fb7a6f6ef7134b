// The tensors' names at a shard (InitRequest.names): keys are positional, so
// a part keeps the name it was first initialised under, in its checkpoints
// too, and a worker that declares another tensor, or another length, under a
// key (another model, a program changed since) is refused, naming both.
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Tensor {
  uint32_t key;
  uint32_t length;
  std::string name;
};

// Rank 0's Init (values, then the names) or another worker's check, which
// says how many parts the worker places on this server in all.
grpc::Status Declare(Shard& shard, const std::vector<Tensor>& tensors, bool check_only,
                     const std::string& node = "worker-0") {
  v1::InitRequest request;
  request.mutable_id()->set_node_id(node);
  request.set_parts_on_server(static_cast<uint32_t>(tensors.size()));
  std::vector<float> values;
  for (const Tensor& t : tensors) {
    v1::PartRef* part = request.add_parts();
    part->set_key(t.key);
    part->set_length(t.length);
    request.add_names(t.name);
    values.resize(values.size() + t.length, 1.0f);
  }
  if (check_only) {
    request.set_check_only(true);
  } else {
    request.set_data(shard_testing::Bytes(values));
  }
  v1::InitResponse response;
  return shard.Init(request, &response);
}

const std::vector<Tensor> kModel = {{0, 6, "fc1.weight"}, {1, 2, "fc1.bias"}};

std::unique_ptr<Shard> Initialised(const ShardOptions& options) {
  auto shard = shard_testing::MakeShard(options);
  EXPECT_TRUE(Declare(*shard, kModel, false).ok());
  return shard;
}

TEST(TensorNamesTest, AWorkerDeclaringTheSameTensorsPasses) {
  auto shard = Initialised(shard_testing::PlainShardOptions(true, 2));
  EXPECT_TRUE(Declare(*shard, kModel, true, "worker-1").ok());
  // A restarted rank 0 declares them again: its values are not taken.
  EXPECT_TRUE(Declare(*shard, kModel, false).ok());
}

TEST(TensorNamesTest, AnotherNameUnderAKeyIsRefusedNamingBoth) {
  auto shard = Initialised(shard_testing::PlainShardOptions(true, 2));
  grpc::Status s = Declare(*shard, {{0, 6, "fc2.weight"}, {1, 2, "fc1.bias"}}, true, "worker-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("worker-1 declares \"fc2.weight\" as part (key 0,"));
  EXPECT_THAT(s.error_message(), HasSubstr("this server holds \"fc1.weight\" there"));
  EXPECT_THAT(s.error_message(), HasSubstr("the workers run different models"));
  // So is a restarted rank 0 whose program changed: its Init keeps nothing new.
  s = Declare(*shard, {{0, 6, "fc1.weight"}, {1, 2, "fc2.bias"}}, false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("\"fc2.bias\" as part (key 1,"));
}

// kubeps.torch before it left out torch.compile's and DataParallel's
// wrappers: a job resumed from checkpoints it wrote declares the same
// tensors without them.
TEST(TensorNamesTest, NamesHeldWithTheWrappersOfEarlierReleasesAreTheSameTensors) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  ASSERT_TRUE(
      Declare(*shard, {{0, 6, "module._orig_mod.fc1.weight"}, {1, 2, "_orig_mod.fc1.bias"}}, false)
          .ok());
  grpc::Status s = Declare(*shard, kModel, true, "worker-1");
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Only the wrappers: another layer is still another tensor.
  s = Declare(*shard, {{0, 6, "fc1.weight"}, {1, 2, "orig_mod.fc1.bias"}}, true, "worker-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// In sync mode the keys it leaves out would never complete a step: the job
// would wait on them, not fail.
TEST(TensorNamesTest, AWorkerDeclaringFewerTensorsIsRefused) {
  auto shard = Initialised(shard_testing::PlainShardOptions(true, 2));
  grpc::Status s = Declare(*shard, {kModel[0]}, true, "worker-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("worker-1 places 1 part on this server, which holds 2"));
  EXPECT_THAT(s.error_message(), HasSubstr("the workers run different models"));
}

TEST(TensorNamesTest, AWorkerPlacingNoPartWhereRankZeroPlacedSomeIsRefused) {
  auto shard = Initialised(shard_testing::PlainShardOptions(true, 2));
  v1::InitRequest request;  // a check naming no part
  request.mutable_id()->set_node_id("worker-1");
  request.set_check_only(true);
  v1::InitResponse response;
  grpc::Status s = shard->Init(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("worker-1 places 0 parts on this server"));
  auto empty = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  EXPECT_TRUE(empty->Init(request, &response).ok());
}

TEST(TensorNamesTest, AnotherLengthIsRefused) {
  auto shard = Initialised(shard_testing::PlainShardOptions(true, 2));
  grpc::Status s = Declare(*shard, {{0, 5, "fc1.weight"}, kModel[1]}, true, "worker-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("length 5), but this server holds 6 elements"));
}

// A shard that restarted without checkpoints holds nothing until rank 0's
// next Init: another worker's check then finds nothing to compare, which
// says nothing about its model.
TEST(TensorNamesTest, APartTheShardDoesNotHoldIsNotJudged) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  EXPECT_TRUE(Declare(*shard, kModel, true, "worker-1").ok());
  ASSERT_TRUE(Declare(*shard, kModel, false).ok());
  EXPECT_EQ(shard->PartValue(0, 0), std::vector<float>(6, 1.0f)) << "the check stored values";
}

TEST(TensorNamesTest, ANameOfMoreThanAKibibyteIsRefused) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 1));
  grpc::Status s = Declare(*shard, {{0, 6, std::string(1025, 'x')}}, false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1025 bytes: at most 1024"));
}

TEST(TensorNamesTest, WithoutNamesNothingIsCompared) {
  // The C++ SDK's programs may name nothing; a part first initialised
  // without a name takes the first one it is told.
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
  ASSERT_TRUE(Declare(*shard, {{0, 6, ""}}, false).ok());
  EXPECT_TRUE(Declare(*shard, {{0, 6, "anything"}}, true, "worker-1").ok());
  EXPECT_EQ(Declare(*shard, {{0, 6, "else"}}, true, "worker-2").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(TensorNamesTest, NamesNotOnePerPartAreRefused) {
  auto shard = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 1));
  v1::InitRequest request;
  request.mutable_id()->set_node_id("worker-0");
  request.add_parts()->set_length(2);
  request.add_names("a");
  request.add_names("b");
  request.set_data(shard_testing::Bytes({1, 2}));
  v1::InitResponse response;
  grpc::Status s = shard->Init(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("2 names for 1 parts"));
}

TEST(TensorNamesTest, ARestartedServerKeepsTheNamesOfItsCheckpoint) {
  const std::string dir =
      (fs::temp_directory_path() / ("kubeps-names-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  ShardOptions options = shard_testing::PlainShardOptions(true, 2);
  options.checkpoint_dir = dir;
  {
    auto shard = Initialised(options);
    ASSERT_TRUE(shard->WriteFinalCheckpoint().ok());
  }
  auto restarted = shard_testing::MakeShard(options);
  int64_t step = -1;
  ASSERT_TRUE(restarted->LoadLatestCheckpoint(&step).ok());
  ASSERT_EQ(step, 0);
  EXPECT_TRUE(Declare(*restarted, kModel, true, "worker-1").ok());
  EXPECT_EQ(Declare(*restarted, {{1, 2, "fc9.bias"}}, true, "worker-1").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kubeps
