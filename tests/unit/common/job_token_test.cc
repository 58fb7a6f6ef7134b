// The job's token (common/job_token.h): the file's mode is checked, a
// changed file is read again, the previous token stays valid for the grace
// period after a change and not after it, and no message holds a token.
#include "common/job_token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace kubeps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

class JobTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("job_token_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "token").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Replaces the file as the kubelet updates a Secret volume: a new file
  // renamed over the old one.
  void Write(const std::string& content, mode_t mode = 0600) {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << content;
    ASSERT_EQ(::chmod(tmp.c_str(), mode), 0);
    std::filesystem::rename(tmp, path_);
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(JobTokenTest, ReadsTheFirstLineOfAPrivateFile) {
  for (mode_t mode : {0600, 0400, 0440, 0640}) {
    Write("s3cret\nignored\n", mode);
    std::shared_ptr<JobToken> token;
    Status s = JobToken::FromFile(path_, &token);
    ASSERT_TRUE(s.ok()) << std::oct << mode << ": " << s.message();
    EXPECT_TRUE(token->enabled());
    EXPECT_THAT(token->Presented(), ElementsAre("s3cret"));
  }
}

TEST_F(JobTokenTest, AFileOthersCanReadOrChangeIsRefusedWithItsMode) {
  for (mode_t mode : {0644, 0604, 0602, 0601, 0660, 0666}) {
    Write("s3cret\n", mode);
    std::shared_ptr<JobToken> token;
    Status s = JobToken::FromFile(path_, &token);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << octal;
    EXPECT_EQ(s.message(), "token file " + path_ + ": mode " + octal +
                               " lets other users read or change the job's token; make it 0600 "
                               "or 0400 (a Secret volume: defaultMode 0400)");
    EXPECT_EQ(token, nullptr);
  }
}

TEST_F(JobTokenTest, AMissingOrEmptyFileIsRefusedWithoutItsContents) {
  std::shared_ptr<JobToken> token;
  Status missing = JobToken::FromFile(path_, &token);
  EXPECT_EQ(missing.message(),
            "token file " + path_ + ": cannot read it (No such file or directory)");
  Write("\n");
  Status empty = JobToken::FromFile(path_, &token);
  EXPECT_EQ(empty.message(), "token file " + path_ + ": it holds no token");
  EXPECT_EQ(token, nullptr);
}

TEST_F(JobTokenTest, AcceptsOnlyTheTokenItself) {
  auto token = JobToken::Fixed("s3cret");
  EXPECT_TRUE(token->Accepts({"s3cret"}));
  EXPECT_TRUE(token->Accepts({"wrong", "s3cret"})) << "any presented value may match";
  EXPECT_FALSE(token->Accepts({}));
  EXPECT_FALSE(token->Accepts({""}));
  EXPECT_FALSE(token->Accepts({"s3cre"}));
  EXPECT_FALSE(token->Accepts({"s3cret "}));
  EXPECT_FALSE(token->Accepts({"S3cret"}));
}

TEST_F(JobTokenTest, NoTokenAcceptsEverythingAndPresentsNothing) {
  for (auto token : {JobToken::None(), JobToken::Fixed("")}) {
    EXPECT_FALSE(token->enabled());
    EXPECT_TRUE(token->Accepts({}));
    EXPECT_TRUE(token->Presented().empty());
  }
}

// A rotated Secret: the new token is read once `reread_after` has passed;
// both are presented and accepted during the grace period, and only the new
// one after it.
TEST_F(JobTokenTest, ARotatedFileIsPickedUpAndThePreviousTokenExpires) {
  Write("old-token\n");
  std::shared_ptr<JobToken> token;
  JobToken::Timing timing;
  timing.reread_after = 50ms;
  timing.rotation_grace = 600ms;
  ASSERT_TRUE(JobToken::FromFile(path_, &token, timing).ok());
  Write("new-token\n");
  EXPECT_THAT(token->Presented(), ElementsAre("old-token")) << "read again only after 50 ms";
  std::this_thread::sleep_for(100ms);
  EXPECT_THAT(token->Presented(), ElementsAre("new-token", "old-token"));
  EXPECT_TRUE(token->Accepts({"new-token"}));
  EXPECT_TRUE(token->Accepts({"old-token"})) << "a pod whose Secret copy is not updated yet";
  std::this_thread::sleep_for(700ms);
  EXPECT_THAT(token->Presented(), ElementsAre("new-token"));
  EXPECT_TRUE(token->Accepts({"new-token"}));
  EXPECT_FALSE(token->Accepts({"old-token"})) << "the grace period is over";
}

TEST_F(JobTokenTest, AnUnreadableUpdateKeepsTheTokenItHas) {
  Write("s3cret\n");
  std::shared_ptr<JobToken> token;
  JobToken::Timing timing;
  timing.reread_after = 10ms;
  ASSERT_TRUE(JobToken::FromFile(path_, &token, timing).ok());
  Write("other\n", 0644);  // refused: others can read it
  std::this_thread::sleep_for(30ms);
  EXPECT_THAT(token->Presented(), ElementsAre("s3cret"));
  std::filesystem::remove(path_);
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(token->Accepts({"s3cret"}));
  EXPECT_FALSE(token->Accepts({"other"}));
}

}  // namespace
}  // namespace kubeps
