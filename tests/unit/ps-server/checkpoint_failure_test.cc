// A shard whose checkpoint writes fail (a read-only or full volume): each
// failure is logged and tolerated, a write that succeeds or a checkpoint
// restored starts the count again, and after
// Shard::kMaxCheckpointFailuresInARow in a row the shard gives up with a
// message that names the folder and the error. Writes fail here because a
// file stands where the checkpoint folder was: the tests run as root, for
// whom a read-only mode stops nothing.
//
// Also: each checkpoint read back is the shard's state at its step, though
// the shard takes it into the message of the checkpoint before; an async
// shard's checkpoint counts the pushes it holds as applied, and a restarted
// one enters the job's generation with what it loaded, and each worker's
// own step; a rollback deletes the checkpoints of the steps it abandons.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_store.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The step a restarted shard loaded, -1 for none.
int64_t LoadedStep(Shard& shard) {
  int64_t step = -1;
  Status loaded = shard.LoadLatestCheckpoint(&step);
  EXPECT_TRUE(loaded.ok()) << loaded.message();
  return step;
}

class CheckpointFailureTest : public ::testing::Test {
 protected:
  CheckpointFailureTest() {
    dir_ =
        (fs::temp_directory_path() / ("kubeps-ckpt-fail-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }

  void Start(uint64_t checkpoint_interval, bool sync = true) {
    ShardOptions options = shard_testing::PlainShardOptions(sync, 1);
    options.checkpoint_dir = dir_;
    options.checkpoint_interval = checkpoint_interval;
    shard_ = shard_testing::MakeShard(options);
    options_ = options;
    v1::InitRequest init;
    init.mutable_id()->set_node_id("worker-0");
    AddPart(&init);
    init.set_data(shard_testing::Bytes({1, 2, 3}));
    v1::InitResponse response;
    ASSERT_TRUE(shard_->Init(init, &response).ok());
  }
  ~CheckpointFailureTest() override { fs::remove_all(dir_); }

  template <typename Message>
  static void AddPart(Message* m) {
    v1::PartRef* p = m->add_parts();
    p->set_key(0);
    p->set_length(3);
  }

  // One sync step of the only worker; the shard then takes a checkpoint of
  // the state the step started from (LastCheckpointStep).
  void Step() {
    ASSERT_TRUE(PushTo(*shard_).ok()) << "a failed checkpoint must not fail the push";
    shard_->DrainCheckpoints();  // the push was answered before its checkpoint was written
    ++step_;
  }

  // The next push of the only worker, a gradient of 0.5 each.
  grpc::Status PushTo(Shard& shard) {
    v1::PushRequest request;
    request.mutable_id()->set_node_id("worker-0");
    request.mutable_id()->set_incarnation(1);
    request.mutable_id()->set_seq(seq_++);
    request.set_worker_rank(0);
    request.set_step(step_);
    request.set_generation(shard.generation());
    AddPart(&request);
    const std::string bytes = shard_testing::Bytes({0.5f, 0.5f, 0.5f});
    PushData data({bytes});
    return shard.Push(request, data);
  }

  uint64_t LastCheckpointStep() const { return step_ - 1; }

  void BreakTheFolder() {
    fs::remove_all(dir_);
    std::ofstream(dir_) << "not a folder";
  }
  void MendTheFolder() {
    fs::remove(dir_);
    fs::create_directories(dir_);
  }

  std::string dir_;
  ShardOptions options_;
  std::unique_ptr<Shard> shard_;
  uint64_t step_ = 0;
  uint64_t seq_ = 0;
};

TEST_F(CheckpointFailureTest, TheShardGivesUpAfterTheLimitInARowNamingTheFolder) {
  Start(1);  // a checkpoint every step
  Step();    // step 1 written
  BreakTheFolder();
  for (int i = 1; i < Shard::kMaxCheckpointFailuresInARow; ++i) {
    Step();
    ASSERT_THAT(shard_->CheckpointFailure(), IsEmpty()) << "gave up after " << i << " failures";
  }
  Step();
  const std::string failure = shard_->CheckpointFailure();
  EXPECT_THAT(failure, HasSubstr(std::to_string(Shard::kMaxCheckpointFailuresInARow) +
                                 " checkpoint writes in a row failed"));
  EXPECT_THAT(failure, HasSubstr("checkpoint of step " + std::to_string(LastCheckpointStep()) +
                                 " into " + dir_ + " failed"));
  // Training was not held back meanwhile.
  EXPECT_EQ(shard_->PartVersion(0, 0), step_);
}

TEST_F(CheckpointFailureTest, AWriteThatSucceedsStartsTheCountAgain) {
  Start(1);
  BreakTheFolder();
  for (int i = 1; i < Shard::kMaxCheckpointFailuresInARow; ++i) Step();
  MendTheFolder();
  Step();
  EXPECT_THAT(shard_->CheckpointSteps(), ::testing::ElementsAre(LastCheckpointStep()));
  BreakTheFolder();
  for (int i = 1; i < Shard::kMaxCheckpointFailuresInARow; ++i) Step();
  EXPECT_THAT(shard_->CheckpointFailure(), IsEmpty());
}

TEST_F(CheckpointFailureTest, ARestoredCheckpointStartsTheCountAgain) {
  Start(1);
  Step();
  Step();  // steps 0 and 1 written
  const std::string saved = dir_ + ".saved";
  fs::remove_all(saved);
  fs::copy(dir_, saved);
  BreakTheFolder();
  for (int i = 1; i < Shard::kMaxCheckpointFailuresInARow; ++i) Step();
  // A recovery rolls the job back to step 1, which this shard holds.
  fs::remove(dir_);
  fs::rename(saved, dir_);
  ASSERT_TRUE(shard_->RestoreCheckpoint(1, 1).ok());
  BreakTheFolder();
  step_ = 1;
  for (int i = 1; i < Shard::kMaxCheckpointFailuresInARow; ++i) Step();
  EXPECT_THAT(shard_->CheckpointFailure(), IsEmpty());
}

TEST_F(CheckpointFailureTest, EachCheckpointReadBackIsTheStateOfItsStepAlone) {
  Start(1);
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(dir_, &store).ok());
  for (int i = 0; i < 4; ++i) {
    Step();
    v1::ShardCheckpoint read;
    ASSERT_TRUE(store->Read(LastCheckpointStep(), &read).ok()) << "step " << LastCheckpointStep();
    ASSERT_EQ(read.parts_size(), 1) << "step " << LastCheckpointStep() << " kept an earlier one's";
    // The worker's pushes applied before the step (none before step 0).
    EXPECT_EQ(read.senders_size(), LastCheckpointStep() == 0 ? 0 : 1);
    EXPECT_EQ(read.parts(0).version(), LastCheckpointStep());
    EXPECT_EQ(read.parts(0).optimizer_steps(), LastCheckpointStep());
    // The shard has applied one more step since: its previous values are
    // the checkpoint's.
    EXPECT_EQ(read.parts(0).value().size(), 3 * sizeof(float));
  }
}

TEST_F(CheckpointFailureTest, AFailedFinalCheckpointIsAnErrorNamingTheFolder) {
  Start(100);  // no checkpoint due before the end
  Step();
  BreakTheFolder();
  Status s = shard_->WriteFinalCheckpoint();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("checkpoint of step 1 into " + dir_ + " failed"));
}

// An async shard takes a checkpoint in the push that makes the count, and
// the job may end right after it: when that write failed, the final
// checkpoint took the state for written and wrote nothing, and a job run
// again found this shard a step behind, or none at all.
TEST_F(CheckpointFailureTest, AnAsyncFinalCheckpointIsWrittenWhenTheLastPeriodicOneFailed) {
  Start(2, /*sync=*/false);
  Step();
  Step();  // push 2 takes a checkpoint: written
  Step();
  BreakTheFolder();
  Step();  // push 4 takes one: its write fails
  MendTheFolder();
  ASSERT_TRUE(shard_->WriteFinalCheckpoint().ok());
  EXPECT_THAT(shard_->CheckpointSteps(), ::testing::ElementsAre(4));
}

// An async shard takes its checkpoint in the push that makes the count: the
// checkpoint holds that push's update, so it must hold its id as applied.
// Else a shard restarted from it applies the push again when its answer was
// lost and the worker resends it.
TEST_F(CheckpointFailureTest, AnAsyncCheckpointHoldsThePushThatTookItAsApplied) {
  Start(1, /*sync=*/false);
  Step();  // {1, 2, 3} - 0.5
  auto restarted = shard_testing::MakeShard(options_);
  ASSERT_EQ(LoadedStep(*restarted), 1);
  ASSERT_EQ(restarted->PartValue(0, 0), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  seq_ = 0;  // the same push, resent
  ASSERT_TRUE(PushTo(*restarted).ok());
  EXPECT_EQ(restarted->PartValue(0, 0), (std::vector<float>{0.5f, 1.5f, 2.5f}))
      << "the resent push was applied a second time";
}

// An async shard restarted after the job's first start over checkpoints
// (generation 1) enters it with what it loaded, and serves its pushes.
TEST_F(CheckpointFailureTest, AnAsyncShardEntersAGenerationKeepingWhatItLoaded) {
  Start(1, /*sync=*/false);
  Step();
  Step();  // {1, 2, 3} - 2 * 0.5
  auto restarted = shard_testing::MakeShard(options_);
  ASSERT_EQ(LoadedStep(*restarted), 2);
  restarted->EnterGeneration(1);
  EXPECT_EQ(restarted->generation(), 1u);
  EXPECT_EQ(restarted->PartValue(0, 0), (std::vector<float>{0, 1, 2}));
  EXPECT_TRUE(PushTo(*restarted).ok());  // the next push, of generation 1
  EXPECT_EQ(restarted->PartValue(0, 0), (std::vector<float>{-0.5f, 0.5f, 1.5f}));
}

// An async shard's checkpoint step counts the pushes of every worker; each
// worker's own step is kept beside it (the one after its newest applied),
// and a shard restarted from it says them again: a job run again starts
// each worker there, not at the count.
TEST_F(CheckpointFailureTest, AnAsyncCheckpointKeepsEachWorkersOwnStep) {
  Start(1, /*sync=*/false);
  step_ = 40;  // the worker went on from its step 40
  Step();
  Step();  // checkpoint 2, the worker's steps 40 and 41 in it
  ASSERT_TRUE(shard_->AsyncWorkerSteps().has_value());
  EXPECT_EQ(shard_->AsyncWorkerSteps()->next_step().at(0), 42u);
  auto restarted = shard_testing::MakeShard(options_);
  ASSERT_EQ(LoadedStep(*restarted), 2);
  ASSERT_TRUE(restarted->AsyncWorkerSteps().has_value());
  EXPECT_EQ(restarted->AsyncWorkerSteps()->next_step().at(0), 42u);
  // A sync shard's steps are the job's: it says none.
  shard_.reset();
  fs::remove_all(dir_);
  step_ = 0;
  Start(1);
  Step();
  EXPECT_FALSE(shard_->AsyncWorkerSteps().has_value());
}

// A checkpoint written before shards kept the workers' steps: the shard
// cannot tell them, and says so (the job then starts every worker at the
// restore step, as before).
TEST_F(CheckpointFailureTest, AnAsyncCheckpointOfAnOlderBuildCannotTellTheWorkersSteps) {
  Start(1, /*sync=*/false);
  Step();
  shard_->DrainCheckpoints();
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(dir_, &store).ok());
  v1::ShardCheckpoint older;
  ASSERT_TRUE(store->Read(1, &older).ok());
  older.clear_async_worker_steps();
  older.set_step(2);
  ASSERT_TRUE(store->Write(older).ok());
  auto restarted = shard_testing::MakeShard(options_);
  ASSERT_EQ(LoadedStep(*restarted), 2);
  EXPECT_FALSE(restarted->AsyncWorkerSteps().has_value());
}

// A rollback to step S abandons the steps after it: a checkpoint of one of
// them is of a timeline the job no longer follows (after a worker was
// dropped, or a shard's write lagged, the redo differs), and if it stayed,
// a later recovery could find that step on every shard, some of the old
// timeline and some of the new, and restore a model of both.
TEST_F(CheckpointFailureTest, ARollbackRemovesTheCheckpointsOfTheStepsItAbandons) {
  Start(1);
  for (int i = 0; i < 4; ++i) Step();  // steps 0 to 3 written
  ASSERT_THAT(shard_->CheckpointSteps(), ::testing::ElementsAre(0, 1, 2, 3));
  ASSERT_TRUE(shard_->RestoreCheckpoint(1, 1).ok());
  EXPECT_THAT(shard_->CheckpointSteps(), ::testing::ElementsAre(0, 1));
  // The new timeline writes them again.
  step_ = 1;
  Step();
  Step();
  EXPECT_THAT(shard_->CheckpointSteps(), ::testing::ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace kubeps
