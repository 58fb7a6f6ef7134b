// The metrics endpoint (common/metrics.h, common/http_metrics_endpoint.h):
// started on a free port, it serves the registry in Prometheus' text format
// at /metrics, answers /healthz and /readyz, and refuses what it cannot do.
#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` in pieces of `piece` bytes to 127.0.0.1:port and reads the
// whole answer (the endpoint closes the connection after it).
std::string Exchange(int port, const std::string& request, size_t piece = 1 << 20) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return "connect failed";
  }
  for (size_t sent = 0; sent < request.size(); sent += piece) {
    const std::string part = request.substr(sent, piece);
    if (::send(fd, part.data(), part.size(), MSG_NOSIGNAL) < 0) break;
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, n);
  ::close(fd);
  return answer;
}

std::string Get(int port, const std::string& path) {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

std::string Body(const std::string& answer) { return answer.substr(answer.find("\r\n\r\n") + 4); }

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        MetricsServer::Start("127.0.0.1", 0, {{"job", "mnist"}, {"role", "server"}}, &metrics_)
            .ok());
    ASSERT_GT(metrics_->port(), 0);
  }
  std::unique_ptr<MetricsServer> metrics_;
};

TEST_F(MetricsEndpointTest, ServesRegisteredMetricsInTheTextFormat) {
  metrics_->Counter("kubeps_test_pushes_total", "Pushes handled", {{"rpc", "Push"}}).Increment(3);
  metrics_->Gauge("kubeps_test_queue_depth", "Queued requests").Set(2.5);
  metrics_->Latency("kubeps_test_seconds", "Time per push").Observe(0.003);
  const std::string answer = Get(metrics_->port(), "/metrics");
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  const std::string body = Body(answer);
  EXPECT_THAT(answer, HasSubstr("Content-Length: " + std::to_string(body.size()) + "\r\n"));
  EXPECT_THAT(body, HasSubstr("# HELP kubeps_test_pushes_total Pushes handled\n"));
  EXPECT_THAT(body, HasSubstr("# TYPE kubeps_test_pushes_total counter\n"));
  EXPECT_THAT(body,
              HasSubstr("kubeps_test_pushes_total{job=\"mnist\",role=\"server\",rpc=\"Push\"} 3"));
  EXPECT_THAT(body, HasSubstr("kubeps_test_queue_depth{job=\"mnist\",role=\"server\"} 2.5"));
  EXPECT_THAT(body, HasSubstr("# TYPE kubeps_test_seconds histogram\n"));
  EXPECT_THAT(
      body, HasSubstr("kubeps_test_seconds_bucket{job=\"mnist\",role=\"server\",le=\"0.005\"} 1"));
  EXPECT_THAT(body, HasSubstr("kubeps_test_seconds_count{job=\"mnist\",role=\"server\"} 1"));
}

TEST_F(MetricsEndpointTest, TheSameSeriesIsOneSeries) {
  metrics_->Counter("kubeps_test_total", "Things", {{"rpc", "Pull"}}).Increment();
  metrics_->Counter("kubeps_test_total", "Things", {{"rpc", "Pull"}}).Increment();
  metrics_->Counter("kubeps_test_total", "Things", {{"rpc", "Push"}}).Increment();
  const std::string body = Body(Get(metrics_->port(), "/metrics"));
  EXPECT_THAT(body, HasSubstr("rpc=\"Pull\"} 2"));
  EXPECT_THAT(body, HasSubstr("rpc=\"Push\"} 1"));
}

TEST_F(MetricsEndpointTest, HealthReadinessAndUnknownPaths) {
  EXPECT_THAT(Get(metrics_->port(), "/healthz"), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(Get(metrics_->port(), "/readyz"), StartsWith("HTTP/1.1 200 OK"));
  bool ready = false;
  metrics_->endpoint()->set_ready_check([&] { return ready; });
  EXPECT_THAT(Get(metrics_->port(), "/readyz"), StartsWith("HTTP/1.1 503 "));
  ready = true;
  EXPECT_THAT(Get(metrics_->port(), "/readyz"), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(Get(metrics_->port(), "/nothing"), StartsWith("HTTP/1.1 404 "));
}

TEST_F(MetricsEndpointTest, ARequestArrivingInPiecesIsAnswered) {
  metrics_->Counter("kubeps_test_total", "Things").Increment();
  const std::string answer =
      Exchange(metrics_->port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", 3);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(answer, HasSubstr("kubeps_test_total"));
}

TEST(MetricsServerTest, ANegativePortKeepsMetricsWithoutServingThem) {
  std::unique_ptr<MetricsServer> metrics;
  ASSERT_TRUE(MetricsServer::Start("", -1, {{"job", "j"}}, &metrics).ok());
  EXPECT_EQ(metrics->endpoint(), nullptr);
  EXPECT_EQ(metrics->port(), 0);
  metrics->Counter("kubeps_test_total", "Things").Increment(4);
  EXPECT_EQ(metrics->Counter("kubeps_test_total", "Things").Value(), 4);
  NullMetrics().Counter("kubeps_test_total", "Things").Increment();  // never fails
}

// A pod on a single-stack IPv6 cluster has only an IPv6 address: the
// endpoint listens there, and only there.
TEST(MetricsServerTest, ServesOnAnIpv6Address) {
  std::unique_ptr<MetricsServer> metrics;
  Status s = MetricsServer::Start("::1", 0, {{"job", "v6"}}, &metrics);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_GT(metrics->port(), 0);
  metrics->Counter("kubeps_test_total", "Things").Increment(2);

  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(static_cast<uint16_t>(metrics->port()));
  address.sin6_addr = in6addr_loopback;
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: [::1]\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, n);
  ::close(fd);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("kubeps_test_total{job=\"v6\"} 2"));
  // Not on IPv4: the address given is the only one served.
  EXPECT_EQ(Get(metrics->port(), "/metrics"), "connect failed");

  // The bracketed form, as an address would carry it, works too.
  std::unique_ptr<MetricsServer> bracketed;
  s = MetricsServer::Start("[::1]", 0, {}, &bracketed);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(MetricsServerTest, AnAddressItCannotServeIsAnError) {
  std::unique_ptr<MetricsServer> first, second;
  ASSERT_TRUE(MetricsServer::Start("127.0.0.1", 0, {}, &first).ok());
  const std::string taken = "127.0.0.1:" + std::to_string(first->port());
  Status s = MetricsServer::Start("127.0.0.1", first->port(), {}, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(taken));
  s = MetricsServer::Start("metrics.example", 0, {}, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("metrics.example"));
}

}  // namespace
}  // namespace kubeps
