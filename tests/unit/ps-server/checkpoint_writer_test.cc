// The shard's checkpoint writer (ps-server/checkpoint_writer.h): the push
// that takes a checkpoint does not wait for the disk, checkpoints are
// written in the order taken, one at a time is held in memory, none
// handed over is lost when the shard ends, and the message written last is
// handed out again for the next checkpoint.
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_writer.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;

std::unique_ptr<v1::ShardCheckpoint> Of(uint64_t step) {
  auto checkpoint = std::make_unique<v1::ShardCheckpoint>();
  checkpoint->set_step(step);
  return checkpoint;
}

// A disk whose writes take as long as the test says.
class SlowDisk {
 public:
  CheckpointWriter::Write Writer() {
    return [this](const v1::ShardCheckpoint& checkpoint) {
      std::unique_lock<std::mutex> lock(mutex_);
      started_.push_back(checkpoint.step());
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
      written_.push_back(checkpoint.step());
    };
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void AwaitStarted(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return started_.size() >= count; });
  }
  std::vector<uint64_t> written() {
    std::lock_guard<std::mutex> lock(mutex_);
    return written_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
  std::vector<uint64_t> started_, written_;
};

TEST(CheckpointWriterTest, HandingOverReturnsWhileTheDiskIsStillWriting) {
  SlowDisk disk;
  CheckpointWriter writer(disk.Writer());
  auto handed = std::async(std::launch::async, [&] { writer.Hand(Of(100)); });
  ASSERT_EQ(handed.wait_for(10s), std::future_status::ready)
      << "the push that took the checkpoint waited for the disk";
  disk.AwaitStarted(1);
  EXPECT_THAT(disk.written(), ::testing::IsEmpty());
  disk.Open();
  writer.Drain();
  EXPECT_THAT(disk.written(), ElementsAre(100));
}

TEST(CheckpointWriterTest, TheNextWaitsForTheWriteBeforeAndAllAreWrittenInOrder) {
  SlowDisk disk;
  CheckpointWriter writer(disk.Writer());
  writer.Hand(Of(100));
  disk.AwaitStarted(1);
  auto next = std::async(std::launch::async, [&] { writer.Hand(Of(200)); });
  EXPECT_EQ(next.wait_for(200ms), std::future_status::timeout)
      << "a second copy of the shard's state was held while the first was written";
  disk.Open();
  ASSERT_EQ(next.wait_for(10s), std::future_status::ready);
  writer.Hand(Of(300));
  writer.Drain();
  EXPECT_THAT(disk.written(), ElementsAre(100, 200, 300));
}

TEST(CheckpointWriterTest, DrainWaitsForTheWriteInProgress) {
  SlowDisk disk;
  CheckpointWriter writer(disk.Writer());
  writer.Hand(Of(100));
  disk.AwaitStarted(1);
  auto drained = std::async(std::launch::async, [&] { writer.Drain(); });
  EXPECT_EQ(drained.wait_for(200ms), std::future_status::timeout);
  disk.Open();
  ASSERT_EQ(drained.wait_for(10s), std::future_status::ready);
  EXPECT_THAT(disk.written(), ElementsAre(100));
}

TEST(CheckpointWriterTest, EndingWritesTheCheckpointHandedOver) {
  SlowDisk disk;
  {
    CheckpointWriter writer(disk.Writer());
    writer.Hand(Of(100));
    disk.Open();
  }
  EXPECT_THAT(disk.written(), ElementsAre(100));
}

TEST(CheckpointWriterTest, TheMessageWrittenLastIsHandedOutForTheNextCheckpoint) {
  SlowDisk disk;
  CheckpointWriter writer(disk.Writer());
  std::unique_ptr<v1::ShardCheckpoint> first = writer.Blank();
  const v1::ShardCheckpoint* first_address = first.get();
  first->set_step(100);
  writer.Hand(std::move(first));
  disk.AwaitStarted(1);
  std::unique_ptr<v1::ShardCheckpoint> during = writer.Blank();
  EXPECT_NE(during.get(), first_address) << "the message being written was handed out";
  disk.Open();
  writer.Drain();
  std::unique_ptr<v1::ShardCheckpoint> after = writer.Blank();
  EXPECT_EQ(after.get(), first_address);
  EXPECT_NE(writer.Blank().get(), first_address) << "one message was handed out twice";
}

}  // namespace
}  // namespace kubeps
