// ReplaceDurably's promise: a file is replaced whole or not at all, and it is
// an error where the folder's entries cannot be flushed after the rename (an
// I/O error of a failing disk or an unreachable NFS server): the new file may
// then vanish in a crash of the node, so a checkpoint must not count as
// written. The folder's fsync fails here through this binary's own fsync,
// which the linker takes before the C library's.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/durable_file.h"

namespace {

std::atomic<int> g_folder_fsync_error{0};  // what a folder's fsync fails with; 0: it does not

}  // namespace

extern "C" int fsync(int fd) {
  using Fsync = int (*)(int);
  static const auto real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  struct stat st;
  const int error = g_folder_fsync_error.load();
  if (error != 0 && ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = error;
    return -1;
  }
  return real(fd);
}

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/kubeps-durable-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
    path_ = dir_ + "/run";
  }
  void TearDown() override {
    g_folder_fsync_error = 0;
    fs::remove_all(dir_);
  }
  std::string Contents() const {
    std::string text;
    Status s = ReadWholeFile(path_, &text);
    EXPECT_TRUE(s.ok()) << s.message();
    return text;
  }

  std::string dir_, path_;
};

TEST_F(DurableFileTest, AFileIsReplacedWholeAndNoTemporaryFileStays) {
  ASSERT_TRUE(ReplaceDurably(dir_, path_, "first\n").ok());
  ASSERT_TRUE(ReplaceDurably(dir_, path_, "second\n").ok());
  EXPECT_EQ(Contents(), "second\n");
  EXPECT_FALSE(fs::exists(path_ + kTemporarySuffix));
}

TEST_F(DurableFileTest, AFolderThatCannotBeFlushedAfterTheRenameIsAnErrorNamingIt) {
  g_folder_fsync_error = EIO;
  Status s = ReplaceDurably(dir_, path_, "new\n");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("replaced " + path_ + " but cannot flush folder " + dir_ +
                                     ": " + std::strerror(EIO)));
  EXPECT_THAT(s.message(), HasSubstr("may not survive a crash"));
  // Whole, as the rename left it: never a torn file.
  EXPECT_EQ(Contents(), "new\n");
  EXPECT_FALSE(fs::exists(path_ + kTemporarySuffix));
}

TEST_F(DurableFileTest, AFileSystemThatCannotFlushFoldersAtAllIsNoError) {
  g_folder_fsync_error = EINVAL;  // as some FUSE volumes answer
  Status s = ReplaceDurably(dir_, path_, "new\n");
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Contents(), "new\n");
}

}  // namespace
}  // namespace kubeps
