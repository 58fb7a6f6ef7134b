// The bearer token re-read from its file as it rotates
// (operator/kubeclient/bearer_token.h), as a projected service-account token
// is by the kubelet.
#include "operator/kubeclient/bearer_token.h"

#include <chrono>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/operator/kubeclient/kube_test_util.h"

namespace kubeps::kube {
namespace {

using ::testing::HasSubstr;
using namespace testing_util;

class BearerTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/token";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(BearerTokenTest, ReadsTheFileWithoutSurroundingSpace) {
  WriteFile(path_, "  abc.def\n");
  std::string token;
  ASSERT_TRUE(ReadTokenFile(path_, &token).ok());
  EXPECT_EQ(token, "abc.def");
}

TEST_F(BearerTokenTest, AnEmptyOrMissingFileIsAnErrorNamingIt) {
  std::string token;
  Status s = ReadTokenFile(path_, &token);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path_));
  WriteFile(path_, " \n");
  s = ReadTokenFile(path_, &token);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path_ + " is empty"));
}

TEST_F(BearerTokenTest, ReloadPicksUpARotatedToken) {
  WriteFile(path_, "old");
  BearerToken token("old", path_);
  EXPECT_FALSE(token.ReloadAfterRefusal("old")) << "the same token is no reason to send again";
  WriteFile(path_, "new\n");
  EXPECT_EQ(token.Get(), "old") << "within the period, Get() does not read the file";
  EXPECT_TRUE(token.ReloadAfterRefusal("old"));
  EXPECT_EQ(token.Get(), "new");
  // A request sent with "old" before another one's reload found "new" is
  // worth repeating too, though this reload changes nothing.
  EXPECT_TRUE(token.ReloadAfterRefusal("old"));
  EXPECT_FALSE(token.ReloadAfterRefusal("new"));
}

TEST_F(BearerTokenTest, GetRereadsOnceThePeriodHasPassed) {
  WriteFile(path_, "old");
  BearerToken token("old", path_, std::chrono::milliseconds(0));
  WriteFile(path_, "new");
  EXPECT_EQ(token.Get(), "new");
}

TEST_F(BearerTokenTest, AFileThatCannotBeReadKeepsTheLastGoodToken) {
  WriteFile(path_, "good");
  BearerToken token("good", path_, std::chrono::milliseconds(0));
  std::filesystem::remove(path_);
  EXPECT_FALSE(token.ReloadAfterRefusal("good"));
  EXPECT_EQ(token.Get(), "good");
  WriteFile(path_, "");
  EXPECT_EQ(token.Get(), "good");
}

TEST_F(BearerTokenTest, AnInlineTokenNeverChanges) {
  BearerToken token("inline", "", std::chrono::milliseconds(0));
  EXPECT_FALSE(token.ReloadAfterRefusal("inline"));
  EXPECT_EQ(token.Get(), "inline");
}

}  // namespace
}  // namespace kubeps::kube
