// The protocol's framing over a socket pair: a 4-byte little-endian length,
// then one JSON object; the 64 MiB limit; what a reader makes of a closed or
// broken stream.
#include "worker-agent/sidecar/framing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::sidecar {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

class FramingTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  void WriteRaw(const std::string& bytes) {
    ASSERT_EQ(::write(fds_[0], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  static std::string Prefix(uint32_t length) {
    std::string prefix(4, '\0');
    for (int i = 0; i < 4; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
    return prefix;
  }
  FrameRead Read(json* message, std::string* error) { return ReadFrame(fds_[1], message, error); }

  int fds_[2] = {-1, -1};
};

TEST_F(FramingTest, AMessageGoesThroughWithALittleEndianLength) {
  const json sent = {{"op", "hello"}, {"id", 7}, {"nonce", "ab\u00e9"}};
  ASSERT_TRUE(WriteFrame(fds_[0], sent).ok());
  char prefix[4];
  ASSERT_EQ(::read(fds_[1], prefix, 4), 4);
  const std::string body = sent.dump();
  EXPECT_EQ(static_cast<unsigned char>(prefix[0]), body.size()) << "length, low byte first";
  EXPECT_EQ(prefix[1] | prefix[2] | prefix[3], 0);
  std::string read_body(body.size(), '\0');
  ASSERT_EQ(::read(fds_[1], read_body.data(), body.size()), static_cast<ssize_t>(body.size()));
  EXPECT_EQ(json::parse(read_body), sent);

  // And back through ReadFrame.
  ASSERT_TRUE(WriteFrame(fds_[0], sent).ok());
  json message;
  std::string error;
  ASSERT_EQ(Read(&message, &error), FrameRead::kMessage) << error;
  EXPECT_EQ(message, sent);
}

TEST_F(FramingTest, AMessageOver64MebibytesIsRefusedUnread) {
  WriteRaw(Prefix((64 << 20) + 1));
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kTooLarge);
  EXPECT_THAT(error, HasSubstr("67108865 bytes"));
  EXPECT_THAT(error, HasSubstr("64 MiB"));
}

TEST_F(FramingTest, Exactly64MebibytesAreAllowed) {
  std::string body = "{\"pad\":\"" + std::string((64 << 20) - 10, 'x') + "\"}";
  ASSERT_EQ(body.size(), 64u << 20);
  std::thread writer([&] { WriteRaw(Prefix(body.size()) + body); });
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kMessage) << error;
  writer.join();
}

TEST_F(FramingTest, ABodyThatIsNotAJsonObjectLeavesTheStreamIntact) {
  WriteRaw(Prefix(5) + "{oops" + Prefix(3) + "[1]");
  ASSERT_TRUE(WriteFrame(fds_[0], {{"op", "bye"}}).ok());
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kNotJson);
  EXPECT_THAT(error, HasSubstr("not JSON"));
  EXPECT_EQ(Read(&message, &error), FrameRead::kNotJson);
  EXPECT_THAT(error, HasSubstr("must be a JSON object, got array"));
  ASSERT_EQ(Read(&message, &error), FrameRead::kMessage) << error;
  EXPECT_EQ(message["op"], "bye");
}

// Found by fuzz_sidecar_session: a number too large for a double made the
// JSON parser throw out_of_range, not parse_error, which ended the agent in
// an uncaught exception. It is a message that is not JSON like any other.
TEST_F(FramingTest, ANumberTooLargeForADoubleIsNotJsonAndNotACrash) {
  const std::string body = R"({"id": 1, "step": 8034712E6442})";
  WriteRaw(Prefix(static_cast<uint32_t>(body.size())) + body);
  ASSERT_TRUE(WriteFrame(fds_[0], {{"op", "bye"}}).ok());
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kNotJson);
  EXPECT_THAT(error, HasSubstr("a message is not JSON: "));
  EXPECT_THAT(error, HasSubstr("number overflow"));
  EXPECT_EQ(Read(&message, &error), FrameRead::kMessage) << "the stream goes on";
  EXPECT_EQ(message["op"], "bye");
}

TEST_F(FramingTest, EndOfStreamBetweenMessagesIsAClose) {
  ::close(fds_[0]);
  fds_[0] = -1;
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kClosed);
}

TEST_F(FramingTest, EndOfStreamInsideAMessageIsBroken) {
  WriteRaw(Prefix(100) + "{\"op\"");
  ::close(fds_[0]);
  fds_[0] = -1;
  json message;
  std::string error;
  EXPECT_EQ(Read(&message, &error), FrameRead::kBroken);
  EXPECT_THAT(error, HasSubstr("after 5 of a message's 100 bytes"));
}

TEST_F(FramingTest, WritingToAClosedPeerIsAnErrorNotASignal) {
  ::close(fds_[1]);
  fds_[1] = -1;
  Status s = WriteFrame(fds_[0], {{"ok", true}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("send"));
}

}  // namespace
}  // namespace kubeps::sidecar
