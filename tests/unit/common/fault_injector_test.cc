// Seeded fault injection (common/fault_injector.h): the KUBEPS_FAULTS syntax,
// the share of requests each fault hits, the same faults for the same seed,
// and what a sender sees of a dropped request or answer (over loopback).
#include "common/fault_injector.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/common/echo_service.h"

namespace kubeps {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

double Injected(MetricsServer& metrics, const std::string& fault) {
  double sum = 0;
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name != "kubeps_faults_injected_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        if (label.name == "fault" && label.value == fault) sum += m.counter.value;
      }
    }
  }
  return sum;
}

std::unique_ptr<MetricsServer> Metrics() {
  std::unique_ptr<MetricsServer> metrics;
  EXPECT_TRUE(MetricsServer::Start("", -1, {}, &metrics).ok());
  return metrics;
}

// For each of `requests` requests: how many times the handler ran (1, or 2
// for a duplicate). No drops here: those need a real call (below).
std::vector<int> HandlerRuns(const FaultConfig& config, int requests, MetricsServer* metrics) {
  FaultInjector faults(config, metrics);
  std::vector<int> runs;
  for (int i = 0; i < requests; ++i) {
    int ran = 0;
    std::string response;
    grpc::Status status = faults.Handle(nullptr, "Push", &response, [&](std::string* out) {
      *out = "answer " + std::to_string(++ran);
      return grpc::Status::OK;
    });
    EXPECT_TRUE(status.ok());
    EXPECT_EQ(response, "answer 1") << "the sender gets the first handling's answer";
    runs.push_back(ran);
  }
  return runs;
}

TEST(FaultConfigTest, ParsesEveryFault) {
  FaultConfig config;
  ASSERT_TRUE(ParseFaultConfig("drop_request=0.2,drop_response=0.1,duplicate=0.05,delay=0.5,"
                               "delay_max_ms=2000,seed=7,",
                               &config)
                  .ok());
  EXPECT_EQ(config.drop_request, 0.2);
  EXPECT_EQ(config.drop_response, 0.1);
  EXPECT_EQ(config.duplicate, 0.05);
  EXPECT_EQ(config.delay, 0.5);
  EXPECT_EQ(config.delay_max_ms, 2000);
  EXPECT_EQ(config.seed, 7u);
}

TEST(FaultConfigTest, ErrorsNameTheBadEntry) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& bad : {Case{"drop=0.1", "unknown fault \"drop\""},
                          Case{"duplicate=1.5", "duplicate is a share, in [0, 1]"},
                          Case{"delay=-0.1", "\"delay=-0.1\""}, Case{"seed", "\"seed\""},
                          Case{"delay_max_ms=ten", "\"delay_max_ms=ten\""}}) {
    FaultConfig config;
    Status s = ParseFaultConfig(bad.text, &config);
    EXPECT_FALSE(s.ok()) << bad.text;
    EXPECT_THAT(s.message(), HasSubstr("KUBEPS_FAULTS")) << bad.text;
    EXPECT_THAT(s.message(), HasSubstr(bad.says)) << bad.text;
  }
}

TEST(FaultConfigTest, FromTheEnvironment) {
  auto metrics = Metrics();
  std::unique_ptr<FaultInjector> faults;
  ::unsetenv("KUBEPS_FAULTS");
  ASSERT_TRUE(FaultInjector::FromEnvironment(metrics.get(), &faults).ok());
  EXPECT_EQ(faults, nullptr) << "no faults unless asked for";
  ::setenv("KUBEPS_FAULTS", "duplicate=0.5", 1);
  ASSERT_TRUE(FaultInjector::FromEnvironment(metrics.get(), &faults).ok());
  EXPECT_NE(faults, nullptr);
  ::setenv("KUBEPS_FAULTS", "duplicate=2", 1);
  std::unique_ptr<FaultInjector> bad;
  EXPECT_FALSE(FaultInjector::FromEnvironment(metrics.get(), &bad).ok());
  ::unsetenv("KUBEPS_FAULTS");
}

// 10000 requests at 0.3: 3000 expected, sigma 46; 250 is more than 5 sigma.
TEST(FaultInjectorTest, DuplicatesHitTheirShareOfRequests) {
  auto metrics = Metrics();
  FaultConfig config;
  config.duplicate = 0.3;
  config.seed = 11;
  const auto runs = HandlerRuns(config, 10000, metrics.get());
  const int duplicated = static_cast<int>(std::count(runs.begin(), runs.end(), 2));
  EXPECT_NEAR(duplicated, 3000, 250);
  EXPECT_EQ(Injected(*metrics, "duplicate"), duplicated);
}

TEST(FaultInjectorTest, DelaysHitTheirShareOfRequests) {
  auto metrics = Metrics();
  FaultConfig config;
  config.delay = 0.2;
  config.delay_max_ms = 0;  // chosen, not waited for
  HandlerRuns(config, 10000, metrics.get());
  EXPECT_NEAR(Injected(*metrics, "delay"), 2000, 220);
}

TEST(FaultInjectorTest, NoFaultsAtZero) {
  auto metrics = Metrics();
  const auto runs = HandlerRuns(FaultConfig{}, 1000, metrics.get());
  EXPECT_EQ(std::count(runs.begin(), runs.end(), 1), 1000);
  std::string response;
  EXPECT_TRUE(WithFaults(nullptr, nullptr, "Push", &response, [](std::string* out) {
                *out = "direct";
                return grpc::Status::OK;
              }).ok());
  EXPECT_EQ(response, "direct");
}

// A failing run can be replayed: the same seed gives the same faults.
TEST(FaultInjectorTest, TheSameSeedGivesTheSameFaults) {
  auto metrics = Metrics();
  FaultConfig config;
  config.duplicate = 0.5;
  config.delay = 0.5;
  config.seed = 42;
  const auto first = HandlerRuns(config, 500, metrics.get());
  EXPECT_EQ(HandlerRuns(config, 500, metrics.get()), first);
  config.seed = 43;
  EXPECT_NE(HandlerRuns(config, 500, metrics.get()), first);
}

// Over a real call: a dropped request is never handled and a dropped answer
// was handled; either way the sender hears nothing before its deadline.
TEST(FaultInjectorTest, TheSenderOfADroppedMessageTimesOut) {
  for (const bool drop_request : {true, false}) {
    SCOPED_TRACE(drop_request ? "drop_request" : "drop_response");
    auto metrics = Metrics();
    FaultConfig config;
    (drop_request ? config.drop_request : config.drop_response) = 1;
    FaultInjector faults(config, metrics.get());
    std::atomic<int> handled{0};
    testing_util::EchoService service(
        [&](grpc::ServerContext* context, const std::string& request, std::string* response) {
          return faults.Handle(context, "Call", response, [&](std::string* out) {
            ++handled;
            *out = request;
            return grpc::Status::OK;
          });
        });
    int port = 0;
    auto server = service.Serve(&port);
    ASSERT_NE(server, nullptr);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 2s);  // generous: a loaded machine
    grpc::Status status = testing_util::CallEcho(channel.get(), &context, "x", nullptr);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    server->Shutdown(std::chrono::system_clock::now() + 5s);
    EXPECT_EQ(handled, drop_request ? 0 : 1);
    EXPECT_EQ(Injected(*metrics, drop_request ? "drop_request" : "drop_response"), 1);
  }
}

}  // namespace
}  // namespace kubeps
