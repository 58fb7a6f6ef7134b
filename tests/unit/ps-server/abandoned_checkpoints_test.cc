// The checkpoints a rollback abandons (ps-server/checkpoint_store.h,
// RemoveAfter) that cannot be deleted now (an I/O error, a stale network
// mount): they are of a timeline the job left, so they are never listed as
// steps a recovery could go back to, a write of the same step replaces them,
// and their deletion is tried again at every later write. Here a file's
// deletion fails through this binary's own unlink, which the C library's
// stands behind.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_store.h"

namespace {

std::mutex g_failing_mutex;
std::string g_failing_unlink;  // the path whose unlink fails with EIO; "": none

}  // namespace

extern "C" int unlink(const char* path) {
  using Unlink = int (*)(const char*);
  static const auto real = reinterpret_cast<Unlink>(dlsym(RTLD_NEXT, "unlink"));
  {
    std::lock_guard<std::mutex> lock(g_failing_mutex);
    if (!g_failing_unlink.empty() && g_failing_unlink == path) {
      errno = EIO;
      return -1;
    }
  }
  return real(path);
}

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class AbandonedCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = fs::temp_directory_path() / "kubeps-abandoned-test-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
    ASSERT_TRUE(CheckpointStore::Open(dir_, &store_).ok());
  }
  void TearDown() override { FailUnlinkOf(""); }

  static void FailUnlinkOf(const std::string& path) {
    std::lock_guard<std::mutex> lock(g_failing_mutex);
    g_failing_unlink = path;
  }
  std::string PathOf(uint64_t step) const {
    char name[48];
    std::snprintf(name, sizeof name, "/step-%020llu.ckpt", static_cast<unsigned long long>(step));
    return dir_ + name;
  }
  void Write(uint64_t step, float value) {
    v1::ShardCheckpoint checkpoint;
    checkpoint.set_step(step);
    checkpoint.add_parts()->set_value(std::string(reinterpret_cast<const char*>(&value), 4));
    Status written = store_->Write(checkpoint);
    ASSERT_TRUE(written.ok()) << written.message();
  }
  std::vector<uint64_t> Steps() const {
    std::vector<uint64_t> steps;
    Status listed = store_->Steps(&steps);
    EXPECT_TRUE(listed.ok()) << listed.message();
    return steps;
  }

  std::string dir_;
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(AbandonedCheckpointsTest, AreNeverListedAndGoAtALaterWrite) {
  Write(10, 1.0f);
  Write(20, 2.0f);
  Write(30, 3.0f);
  FailUnlinkOf(PathOf(30));
  Status removed = store_->RemoveAfter(10);  // a rollback to step 10
  EXPECT_FALSE(removed.ok());
  EXPECT_THAT(removed.message(), HasSubstr(PathOf(30)));
  EXPECT_FALSE(fs::exists(PathOf(20))) << "the others are deleted all the same";
  EXPECT_TRUE(fs::exists(PathOf(30)));
  EXPECT_THAT(Steps(), ElementsAre(10)) << "a recovery must not go back to the left timeline";
  v1::ShardCheckpoint read;
  EXPECT_EQ(store_->Read(30, &read).code(), Status::Code::kNotFound)
      << "not even when named from a listing older than the rollback";

  Write(20, 2.5f);  // the new timeline's step 20; 30 still cannot go
  EXPECT_THAT(Steps(), ElementsAre(10, 20));
  FailUnlinkOf("");
  Write(25, 2.75f);
  EXPECT_FALSE(fs::exists(PathOf(30))) << "its deletion is tried again at each write";
  EXPECT_THAT(Steps(), ElementsAre(10, 20, 25));
}

TEST_F(AbandonedCheckpointsTest, AWriteOfTheSameStepReplacesTheAbandonedOne) {
  Write(10, 1.0f);
  Write(20, 2.0f);
  FailUnlinkOf(PathOf(20));
  EXPECT_FALSE(store_->RemoveAfter(10).ok());
  EXPECT_THAT(Steps(), ElementsAre(10));
  Write(20, 4.0f);
  EXPECT_THAT(Steps(), ElementsAre(10, 20));
  v1::ShardCheckpoint read;
  ASSERT_TRUE(store_->Read(20, &read).ok());
  float value;
  ASSERT_EQ(read.parts(0).value().size(), sizeof value);
  std::memcpy(&value, read.parts(0).value().data(), sizeof value);
  EXPECT_EQ(value, 4.0f) << "the new timeline's";
}

}  // namespace
}  // namespace kubeps
