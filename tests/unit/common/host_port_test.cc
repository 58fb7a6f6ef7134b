// Joining and splitting "host:port" (common/host_port.h): IPv6 literals go
// in brackets, everything else stays as it is.
#include "common/host_port.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps {
namespace {

using ::testing::HasSubstr;

TEST(JoinHostPortTest, BracketsIpv6LiteralsOnly) {
  EXPECT_EQ(JoinHostPort("10.0.0.7", 5000), "10.0.0.7:5000");
  EXPECT_EQ(JoinHostPort("job-scheduler.ns.svc", 5000), "job-scheduler.ns.svc:5000");
  EXPECT_EQ(JoinHostPort("::1", 0), "[::1]:0");
  EXPECT_EQ(JoinHostPort("fd00:10:96::1", "443"), "[fd00:10:96::1]:443");
  EXPECT_EQ(JoinHostPort("fe80::1%eth0", 80), "[fe80::1%eth0]:80");
  // Already bracketed: not bracketed twice.
  EXPECT_EQ(JoinHostPort("[fd00::1]", 443), "[fd00::1]:443");
}

TEST(SplitHostPortTest, TakesEveryFormApart) {
  struct Case {
    std::string address, host;
    int port;
  };
  for (const Case& c :
       {Case{"10.0.0.7:5000", "10.0.0.7", 5000},
        Case{"job-scheduler.ns.svc:5000", "job-scheduler.ns.svc", 5000}, Case{"[::1]:0", "::1", 0},
        Case{"[fd00:10:96::1]:443", "fd00:10:96::1", 443},
        Case{"localhost:65535", "localhost", 65535}}) {
    std::string host = "unset";
    int port = -1;
    Status s = SplitHostPort(c.address, &host, &port);
    ASSERT_TRUE(s.ok()) << c.address << ": " << s.message();
    EXPECT_EQ(host, c.host) << c.address;
    EXPECT_EQ(port, c.port) << c.address;
  }
}

TEST(SplitHostPortTest, JoinThenSplitGivesBackHostAndPort) {
  for (const std::string host : {"127.0.0.1", "::1", "fd00::abcd:7", "pod.example"}) {
    std::string split_host;
    int port = 0;
    ASSERT_TRUE(SplitHostPort(JoinHostPort(host, 8080), &split_host, &port).ok()) << host;
    EXPECT_EQ(split_host, host);
    EXPECT_EQ(port, 8080);
  }
}

TEST(SplitHostPortTest, RefusesWhatIsNotOneAddress) {
  std::string host = "unset";
  int port = -1;
  for (const std::string bad :
       {"", "10.0.0.7", ":5000", "10.0.0.7:", "10.0.0.7:http", "10.0.0.7:65536", "10.0.0.7:-1",
        "[::1]", "[::1]5000", "[::1:5000", "[]:5000", "::1:5000"}) {
    Status s = SplitHostPort(bad, &host, &port);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("\"" + bad + "\"")) << bad;
  }
  EXPECT_EQ(host, "unset");  // untouched on failure
  EXPECT_EQ(port, -1);
  // An unbracketed IPv6 address says how to write it.
  EXPECT_THAT(SplitHostPort("fd00::1:443", &host, &port).message(), HasSubstr("[fd00::1]:443"));
}

TEST(HostPortTest, UnbracketedAndIpv6Literal) {
  EXPECT_EQ(Unbracketed("[fd00::1]"), "fd00::1");
  EXPECT_EQ(Unbracketed("fd00::1"), "fd00::1");
  EXPECT_EQ(Unbracketed("10.0.0.7"), "10.0.0.7");
  EXPECT_TRUE(IsIpv6Literal("::1"));
  EXPECT_TRUE(IsIpv6Literal("[fd00:10:96::1]"));
  EXPECT_TRUE(IsIpv6Literal("fe80::1%eth0"));
  EXPECT_FALSE(IsIpv6Literal("10.0.0.7"));
  EXPECT_FALSE(IsIpv6Literal("kubernetes.default.svc"));
  EXPECT_FALSE(IsIpv6Literal("[kubernetes]"));
}

}  // namespace
}  // namespace kubeps
