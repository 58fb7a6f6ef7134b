// A checkpoint file's bytes (ps-server/checkpoint_format.h): what is written
// is read back whole; a flipped bit or a cut file is a damaged checkpoint,
// never a different state; a shard's state past 2 GiB is written and read;
// and a file written before the format still loads.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_store.h"

namespace kubeps {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string pattern = std::filesystem::temp_directory_path() / "kubeps-format-test-XXXXXX";
  return ::mkdtemp(pattern.data());
}

std::string FileOf(const std::string& dir, uint64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "/step-%020llu.ckpt", static_cast<unsigned long long>(step));
  return dir + name;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every field set, two parts and two senders.
v1::ShardCheckpoint Full(uint64_t step) {
  v1::ShardCheckpoint checkpoint;
  checkpoint.set_step(step);
  checkpoint.set_generation(3);
  for (uint32_t key : {7u, 9u}) {
    auto* part = checkpoint.add_parts();
    part->set_key(key);
    part->set_offset(key * 1000);
    part->set_version(step);
    part->set_value(std::string(256, static_cast<char>(key)));
    part->set_slot1(std::string(256, 'm'));
    part->set_slot2(std::string(256, 'v'));
    part->set_optimizer_steps(step + 1);
  }
  for (const char* node : {"worker-0", "worker-1"}) {
    auto* sender = checkpoint.add_senders();
    sender->set_node_id(node);
    sender->set_incarnation(42);
    sender->set_floor(10);
    sender->add_applied(12);
    sender->add_applied(15);
  }
  return checkpoint;
}

class CheckpointFormatTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(CheckpointStore::Open(dir_, &store_).ok()); }

  std::string dir_ = TempDir();
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(CheckpointFormatTest, WhatIsWrittenIsReadBackWhole) {
  const v1::ShardCheckpoint written = Full(100);
  ASSERT_TRUE(store_->Write(written).ok());
  v1::ShardCheckpoint read;
  ASSERT_TRUE(store_->Read(100, &read).ok());
  std::string difference;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differ.Compare(written, read)) << difference;
}

// A bit flipped in a stored float parsed as well as the right one: the
// shard loaded a different state and said nothing.
TEST_F(CheckpointFormatTest, AFlippedBitIsADamagedFileAndTheOneBeforeIsLoaded) {
  ASSERT_TRUE(store_->Write(Full(100)).ok());
  ASSERT_TRUE(store_->Write(Full(200)).ok());
  std::string bytes = Contents(FileOf(dir_, 200));
  const size_t in_a_value = bytes.find(std::string(64, static_cast<char>(9)));
  ASSERT_NE(in_a_value, std::string::npos);
  bytes[in_a_value + 50] ^= 0x10;
  Overwrite(FileOf(dir_, 200), bytes);

  v1::ShardCheckpoint loaded;
  bool found = false;
  std::string skipped;
  ASSERT_TRUE(store_->ReadLatest(&loaded, &found, &skipped).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(loaded.step(), 100u);
  EXPECT_THAT(skipped, HasSubstr(FileOf(dir_, 200) + " is damaged"));
}

// Cut anywhere (a volume that lost the file's tail), a file is damaged.
// Cut after a part, one message parsed: a checkpoint with fewer parts than
// the shard had.
TEST_F(CheckpointFormatTest, AFileCutAnywhereIsDamaged) {
  ASSERT_TRUE(store_->Write(Full(100)).ok());
  const std::string whole = Contents(FileOf(dir_, 100));
  for (size_t length = 0; length < whole.size(); ++length) {
    Overwrite(FileOf(dir_, 100), whole.substr(0, length));
    v1::ShardCheckpoint read;
    Status s = store_->Read(100, &read);
    EXPECT_FALSE(s.ok()) << "cut at " << length << " of " << whole.size() << " bytes";
  }
  Overwrite(FileOf(dir_, 100), whole + "x");
  v1::ShardCheckpoint read;
  EXPECT_FALSE(store_->Read(100, &read).ok()) << "bytes after the checksum";
}

// An empty file parsed as a message of the format before: a checkpoint of
// step 0 with no parts, loaded over the shard's state.
TEST_F(CheckpointFormatTest, AnEmptyFileIsDamaged) {
  Overwrite(FileOf(dir_, 0), "");
  v1::ShardCheckpoint read;
  Status s = store_->Read(0, &read);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is damaged"));
}

// A file a newer kubeps wrote (a server rolled back to an older image) is an
// error that says so, and is not set aside as damaged.
TEST_F(CheckpointFormatTest, AFileOfANewerFormatIsAnErrorNotDamage) {
  ASSERT_TRUE(store_->Write(Full(100)).ok());
  std::string bytes = Contents(FileOf(dir_, 100));
  bytes[8] = 3;  // the format version, after the 8 bytes of magic
  Overwrite(FileOf(dir_, 100), bytes);
  v1::ShardCheckpoint loaded;
  bool found = true;
  std::string skipped;
  Status s = store_->ReadLatest(&loaded, &found, &skipped);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is of format 3, which this kubeps (format 2) cannot read"));
  EXPECT_FALSE(found);
  EXPECT_TRUE(skipped.empty()) << skipped;
  EXPECT_TRUE(std::filesystem::exists(FileOf(dir_, 100)));
}

// One message cannot be serialized past 2 GiB: every write of a shard that
// big failed, and after 10 the job did. Some 30 s on a small virtual
// machine, most of it the kernel handing out 6 GiB of fresh pages.
TEST(CheckpointFormatBigTest, AShardStatePastTwoGibIsWrittenAndRead) {
  const std::string dir = TempDir();
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  constexpr size_t kPartBytes = size_t{720} << 20;
  v1::ShardCheckpoint big;
  big.set_step(5);
  for (uint32_t key = 0; key < 3; ++key) {
    auto* part = big.add_parts();
    part->set_key(key);
    part->mutable_value()->assign(kPartBytes, static_cast<char>('a' + key));
  }
  ASSERT_GT(big.ByteSizeLong(), size_t{1} << 31);
  Status written = store->Write(big);
  ASSERT_TRUE(written.ok()) << written.message();
  big.Clear();  // memory for the one read back
  v1::ShardCheckpoint read;
  Status s = store->Read(5, &read);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(read.parts_size(), 3);
  for (uint32_t key = 0; key < 3; ++key) {
    const std::string& value = read.parts(key).value();
    ASSERT_EQ(value.size(), kPartBytes);
    EXPECT_EQ(value.front(), 'a' + key);
    EXPECT_EQ(value.back(), 'a' + key);
  }
  std::filesystem::remove_all(dir);  // 2 GiB of scratch
}

// A shard restarted by a newer kubeps over its older checkpoints (one
// message per file) loads them.
TEST_F(CheckpointFormatTest, AFileWrittenBeforeTheFormatIsRead) {
  const v1::ShardCheckpoint old = Full(100);
  Overwrite(FileOf(dir_, 100), old.SerializeAsString());
  v1::ShardCheckpoint read;
  ASSERT_TRUE(store_->Read(100, &read).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(old, read));
}

}  // namespace
}  // namespace kubeps
