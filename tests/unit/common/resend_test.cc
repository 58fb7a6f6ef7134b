// Resend on timeout (common/resend.h): which failures are sent again and how
// often, what the caller gets back, the metrics, and, over a real loopback
// channel, that every resend carries the same bytes and the job's token.
#include "common/resend.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/common/echo_service.h"

namespace kubeps {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

ResendPolicy FastPolicy(int max_resends = 3) {
  ResendPolicy policy;
  policy.timeout_ms = 200;
  policy.max_resends = max_resends;
  policy.backoff_base_ms = 1;
  policy.backoff_cap_ms = 4;
  return policy;
}

double CounterValue(MetricsServer& metrics, const std::string& name) {
  double sum = 0;
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name == name) {
      for (const auto& m : family.metric) sum += m.counter.value;
    }
  }
  return sum;
}

TEST(ResendCallerTest, RetryableFailuresAreSentAgainUpToThePolicy) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE,
        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::CANCELLED}) {
    SCOPED_TRACE(static_cast<int>(code));
    ResendCaller caller(FastPolicy(3), nullptr, nullptr);
    int attempts = 0;
    Status s = caller.Call("server 1 (10.0.0.1:7000)", "Push", [&](grpc::ClientContext&) {
      ++attempts;
      return grpc::Status(code, "nope");
    });
    EXPECT_EQ(attempts, 4);
    EXPECT_EQ(s.code(), Status::Code::kUnavailable);
    EXPECT_THAT(s.message(), HasSubstr("Push to server 1 (10.0.0.1:7000) failed after 4 tries"));
    EXPECT_THAT(s.message(), HasSubstr("nope"));
  }
}

TEST(ResendCallerTest, ZeroResendsIsASingleAttempt) {
  ResendCaller caller(FastPolicy(0), nullptr, nullptr);
  int attempts = 0;
  Status s = caller.Call("peer", "Pull", [&](grpc::ClientContext&) {
    ++attempts;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
  });
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(s.message(), HasSubstr("after 1 try "));
}

TEST(ResendCallerTest, OtherFailuresAreNotSentAgain) {
  struct Case {
    grpc::StatusCode grpc_code;
    Status::Code code;
  };
  for (const Case& c : {Case{grpc::StatusCode::INVALID_ARGUMENT, Status::Code::kInvalidArgument},
                        Case{grpc::StatusCode::NOT_FOUND, Status::Code::kNotFound},
                        Case{grpc::StatusCode::ALREADY_EXISTS, Status::Code::kAlreadyExists},
                        Case{grpc::StatusCode::PERMISSION_DENIED, Status::Code::kPermissionDenied},
                        Case{grpc::StatusCode::UNAUTHENTICATED, Status::Code::kPermissionDenied},
                        Case{grpc::StatusCode::INTERNAL, Status::Code::kUnknown},
                        Case{grpc::StatusCode::UNIMPLEMENTED, Status::Code::kUnknown}}) {
    SCOPED_TRACE(static_cast<int>(c.grpc_code));
    ResendCaller caller(FastPolicy(5), nullptr, nullptr);
    int attempts = 0;
    Status s = caller.Call("peer", "Push", [&](grpc::ClientContext&) {
      ++attempts;
      return grpc::Status(c.grpc_code, "refused");
    });
    EXPECT_EQ(attempts, 1);
    EXPECT_EQ(s.code(), c.code);
  }
}

// A shard that rolled back answers ABORTED: the caller must resume, not resend.
TEST(ResendCallerTest, AbortedComesBackAtOnceAsAborted) {
  ResendCaller caller(FastPolicy(5), nullptr, nullptr);
  int attempts = 0;
  Status s = caller.Call("shard 0", "Push", [&](grpc::ClientContext&) {
    ++attempts;
    return grpc::Status(grpc::StatusCode::ABORTED, "rolled back to step 7");
  });
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(s.IsAborted());
  EXPECT_THAT(s.message(), HasSubstr("step 7"));
}

TEST(ResendCallerTest, AResendThatGetsThroughSucceedsAndIsCounted) {
  std::unique_ptr<MetricsServer> metrics;
  ASSERT_TRUE(MetricsServer::Start("", -1, {}, &metrics).ok());
  ResendCaller caller(FastPolicy(5), nullptr, metrics.get());
  int attempts = 0;
  Status s = caller.Call("peer", "Pull", [&](grpc::ClientContext&) {
    return ++attempts < 3 ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow")
                          : grpc::Status::OK;
  });
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(attempts, 3);
  EXPECT_EQ(CounterValue(*metrics, "kubeps_rpc_resends_total"), 2);
  EXPECT_EQ(CounterValue(*metrics, "kubeps_rpc_timeouts_total"), 2);
}

TEST(ResendCallerTest, AbandonStopsTheResends) {
  ResendCaller caller(FastPolicy(5), nullptr, nullptr);
  int attempts = 0;
  Status s = caller.Call(
      "peer", "Barrier",
      [&](grpc::ClientContext&) {
        ++attempts;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      },
      0, [&] { return attempts >= 2; });
  EXPECT_EQ(attempts, 2);
  EXPECT_THAT(s.message(), HasSubstr("abandoned after 2 tries"));
}

TEST(ResendCallerTest, EveryAttemptHasItsOwnDeadlineWithTheLongPollAdded) {
  ResendPolicy policy = FastPolicy(2);
  policy.timeout_ms = 1000;
  ResendCaller caller(policy, nullptr, nullptr);
  std::vector<std::chrono::system_clock::duration> budgets;
  Status s = caller.Call(
      "peer", "Pull",
      [&](grpc::ClientContext& context) {
        budgets.push_back(context.deadline() - std::chrono::system_clock::now());
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
      },
      /*long_poll_ms=*/5000);
  ASSERT_EQ(budgets.size(), 3u);
  for (auto budget : budgets) {
    EXPECT_GT(budget, 5s);
    EXPECT_LE(budget, 6s);
  }
}

// Over a real channel: the server drops the first two attempts (it answers
// only after the client's deadline), then answers. Each resend is the same
// request, bytes for bytes, with the job's token.
TEST(ResendCallerTest, EveryResendCarriesTheSameRequestAndToken) {
  auto job_token = JobToken::Fixed("job-token");
  std::mutex mutex;
  std::vector<std::string> requests, tokens;
  testing_util::EchoService service(
      [&](grpc::ServerContext* context, const std::string& request, std::string* response) {
        int seen;
        {
          std::lock_guard<std::mutex> lock(mutex);
          requests.push_back(request);
          auto token = context->client_metadata().find(kTokenMetadataKey);
          tokens.push_back(token == context->client_metadata().end()
                               ? ""
                               : std::string(token->second.data(), token->second.size()));
          seen = static_cast<int>(requests.size());
        }
        if (seen <= 2) {
          while (!context->IsCancelled()) std::this_thread::sleep_for(5ms);  // the lost answer
          return grpc::Status(grpc::StatusCode::CANCELLED, "too late");
        }
        if (grpc::Status auth = CheckToken(*context, job_token.get()); !auth.ok()) return auth;
        *response = "echo " + request;
        return grpc::Status::OK;
      });
  int port = 0;
  auto server = service.Serve(&port);
  ASSERT_NE(server, nullptr);
  auto channel = OpenChannel("127.0.0.1:" + std::to_string(port));

  ResendPolicy policy = FastPolicy(10);
  policy.timeout_ms = 1000;  // a first connection on a loaded machine may take a while
  ResendCaller caller(policy, job_token, nullptr);
  const std::string request = "worker 3, incarnation 1, sequence 42";
  std::string response;
  Status s = caller.Call("echo", "Call", [&](grpc::ClientContext& context) {
    return testing_util::CallEcho(channel.get(), &context, request, &response);
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(response, "echo " + request);
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(requests, std::vector<std::string>(requests.size(), request));
  EXPECT_EQ(tokens, std::vector<std::string>(requests.size(), "job-token"));
  server->Shutdown(std::chrono::system_clock::now() + 5s);
}

TEST(ResendCallerTest, AWrongTokenIsRefusedAndNotSentAgain) {
  auto job_token = JobToken::Fixed("job-token");
  std::atomic<int> calls{0};
  testing_util::EchoService service(
      [&](grpc::ServerContext* context, const std::string&, std::string*) {
        ++calls;
        return CheckToken(*context, job_token.get());
      });
  int port = 0;
  auto server = service.Serve(&port);
  ASSERT_NE(server, nullptr);
  auto channel = OpenChannel("127.0.0.1:" + std::to_string(port));
  ResendPolicy policy = FastPolicy(5);
  policy.timeout_ms = 5000;  // the first connection may be slow on a loaded machine
  ResendCaller caller(policy, JobToken::Fixed("someone-else"), nullptr);
  Status s = caller.Call("echo", "Call", [&](grpc::ClientContext& context) {
    return testing_util::CallEcho(channel.get(), &context, "x", nullptr);
  });
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(calls, 1);
  server->Shutdown(std::chrono::system_clock::now() + 5s);
}

// During a rotation a client presents its new and its previous token (two
// values of one metadata key): the server accepts the request when either is
// one it accepts, in any order, and refuses it when neither is.
TEST(ResendCallerTest, EveryPresentedTokenIsChecked) {
  auto job_token = JobToken::Fixed("new-token");
  testing_util::EchoService service(
      [&](grpc::ServerContext* context, const std::string&, std::string* response) {
        if (grpc::Status auth = CheckToken(*context, job_token.get()); !auth.ok()) return auth;
        *response = "ok";
        return grpc::Status::OK;
      });
  int port = 0;
  auto server = service.Serve(&port);
  ASSERT_NE(server, nullptr);
  auto channel = OpenChannel("127.0.0.1:" + std::to_string(port));
  auto call = [&](std::vector<std::string> tokens) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    for (const std::string& t : tokens) context.AddMetadata(kTokenMetadataKey, t);
    std::string response;
    return testing_util::CallEcho(channel.get(), &context, "x", &response).error_code();
  };
  EXPECT_EQ(call({"old-token", "new-token"}), grpc::StatusCode::OK);
  EXPECT_EQ(call({"new-token", "old-token"}), grpc::StatusCode::OK);
  EXPECT_EQ(call({"old-token", "older-token"}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call({}), grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown(std::chrono::system_clock::now() + 5s);
}

// A stop (SIGTERM) ends the call at once: the attempt waiting for its
// deadline is cancelled, no backoff is waited out, nothing is sent again.
TEST(ResendCallerTest, AStopEndsTheCallInFlightAndTheResends) {
  std::atomic<int> calls{0};
  testing_util::EchoService service(
      [&](grpc::ServerContext* context, const std::string&, std::string*) {
        ++calls;
        while (!context->IsCancelled()) std::this_thread::sleep_for(5ms);  // never answers
        return grpc::Status(grpc::StatusCode::CANCELLED, "too late");
      });
  int port = 0;
  auto server = service.Serve(&port);
  ASSERT_NE(server, nullptr);
  auto channel = OpenChannel("127.0.0.1:" + std::to_string(port));
  ResendPolicy policy = FastPolicy(100);
  policy.timeout_ms = 10000;
  StopToken stop;
  ResendCaller caller(policy, nullptr, nullptr, &stop);
  std::thread stopper([&] {
    while (calls == 0) std::this_thread::sleep_for(5ms);
    stop.RequestStop();
  });
  const auto start = std::chrono::steady_clock::now();
  Status s = caller.Call("scheduler 10.0.0.1:7000", "Register", [&](grpc::ClientContext& context) {
    return testing_util::CallEcho(channel.get(), &context, "x", nullptr);
  });
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the attempt waited out its deadline";
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("Register to scheduler 10.0.0.1:7000 given up after 1 try"));
  EXPECT_THAT(s.message(), HasSubstr("this process is stopping"));
  EXPECT_EQ(calls, 1);
  // Stopped already: the next call makes no attempt at all.
  int attempts = 0;
  s = caller.Call("scheduler", "Heartbeat", [&](grpc::ClientContext&) {
    ++attempts;
    return grpc::Status::OK;
  });
  EXPECT_EQ(attempts, 0);
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  server->Shutdown(std::chrono::system_clock::now() + 5s);
}

TEST(StopTokenTest, SleepForEndsAtTheStop) {
  StopToken stop;
  EXPECT_TRUE(stop.SleepFor(1ms));
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    stop.RequestStop();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(stop.SleepFor(10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  stopper.join();
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_FALSE(stop.SleepFor(10s)) << "a stopped token sleeps no more";
}

}  // namespace
}  // namespace kubeps
