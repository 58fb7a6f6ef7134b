// Whether a job can resume from a shard's checkpoint (Shard::FitsThisJob):
// one written by a job of another number of servers, of optimizer none
// against another, or by an async job for a sync one is refused at start,
// saying both, and a restart would find it again; one of another optimizer
// among sgd, momentum and adam keeps its parameters, and the new
// optimizer's state starts fresh.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::vector<float> kGradient = {1.0f, -1.0f};

class CheckpointFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("kubeps-fit-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    // Async: a loaded shard takes pushes at once, with no recovery to wait for.
    options_ = shard_testing::PlainShardOptions(false, 1);
    options_.checkpoint_dir = dir_;
    options_.num_servers = 2;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A shard of options_ whose part {0, 0} took one update, checkpointed
  // into a fresh folder.
  void WriteOne() {
    fs::remove_all(dir_);
    auto shard = shard_testing::MakeShard(options_);
    shard_testing::InitKeys(*shard, {0}, 2, [](uint32_t, uint32_t) { return 0.0f; });
    Push(*shard, 1);
    ASSERT_TRUE(shard->WriteFinalCheckpoint().ok());
  }
  static void Push(Shard& shard, uint64_t seq) {
    PushData data(shard_testing::OnePiece(kGradient));
    ASSERT_TRUE(shard.Push(shard_testing::PushOfKeys(0, seq, seq - 1, {0}, 2), data).ok());
  }
  Status Load(int64_t* step) {
    loaded_ = shard_testing::MakeShard(options_);
    return loaded_->LoadLatestCheckpoint(step);
  }
  // A shard of options_ refuses what is written, saying `says`.
  void ExpectRefusal(const std::string& says) {
    int64_t step = -1;
    Status refused = Load(&step);
    EXPECT_EQ(refused.code(), Status::Code::kFailedPrecondition);
    EXPECT_THAT(refused.message(), HasSubstr(says));
    EXPECT_EQ(step, -1);
  }

  std::string dir_;
  ShardOptions options_;
  std::unique_ptr<Shard> loaded_;
};

TEST_F(CheckpointFitTest, AnotherNumberOfServersIsRefusedSayingBoth) {
  WriteOne();
  options_.num_servers = 3;
  ExpectRefusal("in " + dir_ + " was written by a job of 2 servers, and this job has 3");
  options_.num_servers = 2;  // nothing was touched
  int64_t step = -1;
  EXPECT_TRUE(Load(&step).ok());
  EXPECT_EQ(step, 1);
}

TEST_F(CheckpointFitTest, OptimizerNoneAgainstAnotherIsRefusedEitherWay) {
  // With none the servers keep averaged gradients, not parameters.
  options_.optimizer.name = "none";
  WriteOne();
  options_.optimizer.name = "adam";
  ExpectRefusal("servers' optimizer is none, and this job's is adam");
  WriteOne();  // adam's
  options_.optimizer.name = "none";
  ExpectRefusal("servers' optimizer is adam, and this job's is none");
}

TEST_F(CheckpointFitTest, AnAsyncJobsCheckpointIsRefusedToASyncJobAndNotTheOtherWay) {
  WriteOne();  // async: the step counts pushes
  options_.sync = true;
  ExpectRefusal("written by an async job, and this job is sync");
  WriteOne();  // sync's
  options_.sync = false;
  int64_t step = -1;
  EXPECT_TRUE(Load(&step).ok());
}

TEST_F(CheckpointFitTest, AnotherOptimizerKeepsTheParametersAndStartsItsStateFresh) {
  options_.optimizer.name = "momentum";
  options_.optimizer.learning_rate = 1.0f;
  WriteOne();  // velocity {1, -1}, parameters {-1, 1}
  options_.optimizer = OptimizerConfig{};
  options_.optimizer.name = "adam";
  options_.optimizer.learning_rate = 0.1f;
  int64_t step = -1;
  ASSERT_TRUE(Load(&step).ok());
  EXPECT_EQ(loaded_->PartValue(0, 0), (std::vector<float>{-1.0f, 1.0f}));
  // A fresh Adam's first update moves each value by the learning rate, the
  // gradient's sign. Before, Adam took momentum's velocity for its first
  // moment, with no second moment and an update count of 1.
  Push(*loaded_, 2);
  const std::vector<float> after = loaded_->PartValue(0, 0);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_NEAR(after[0], -1.1f, 1e-5);
  EXPECT_NEAR(after[1], 1.1f, 1e-5);
}

}  // namespace
}  // namespace kubeps
