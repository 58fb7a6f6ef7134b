// ReplaceDurably's promise: a file is replaced whole or not at all, and a
// folder whose entries cannot be flushed after the rename (an I/O error of a
// failing disk or an unreachable NFS server) is said loudly, where before it
// was ignored: the new file may then vanish in a crash of the node. The
// folder's fsync fails here through this binary's own fsync, which the
// linker takes before the C library's.
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

TEST_F(DurableFileTest, AFolderThatCannotBeFlushedAfterTheRenameIsLoggedNamingIt) {
  g_folder_fsync_error = EIO;
  const uint64_t before = FoldersNotFlushed();
  ::testing::internal::CaptureStderr();
  Status s = ReplaceDurably(dir_, path_, "new\n");
  const std::string said = ::testing::internal::GetCapturedStderr();
  // Done: the file is in place and whole, and the caller goes on (prunes,
  // trains); a failure would only stop a job whose disk holds what it wrote.
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Contents(), "new\n");
  EXPECT_FALSE(fs::exists(path_ + kTemporarySuffix));
  EXPECT_THAT(said, HasSubstr("replaced " + path_ + " but cannot flush folder " + dir_ + ": " +
                              std::strerror(EIO)));
  EXPECT_THAT(said, HasSubstr("may not survive a crash of this node"));
  EXPECT_EQ(FoldersNotFlushed(), before + 1);  // the server's counter
}

TEST_F(DurableFileTest, FileSystemsThatCannotFlushFoldersAtAllAreNotReported) {
  const uint64_t before = FoldersNotFlushed();
  for (const int error : {EINVAL, EROFS, EOPNOTSUPP}) {
    g_folder_fsync_error = error;
    ::testing::internal::CaptureStderr();
    Status s = ReplaceDurably(dir_, path_, "new\n");
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(said.find("cannot flush folder"), std::string::npos) << std::strerror(error);
  }
  EXPECT_EQ(FoldersNotFlushed(), before);
}

}  // namespace
}  // namespace kubeps
