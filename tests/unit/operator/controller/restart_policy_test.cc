// What a replica failure means (operator/controller/restart_policy.h):
// OnFailure restarts up to backoffLimit, Never never restarts, ExitCode
// retries signals (128+N) and gives up on the program's own exit codes.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/restart_policy.h"

namespace kubeps::controller {
namespace {

using ::testing::HasSubstr;

api::RunPolicy Policy(api::RestartPolicy restart, int backoff_limit) {
  api::RunPolicy policy;
  policy.restart_policy = restart;
  policy.backoff_limit = backoff_limit;
  return policy;
}

TEST(RestartPolicyTest, OnFailureRestartsUntilBackoffLimit) {
  const auto policy = Policy(api::RestartPolicy::kOnFailure, 3);
  for (int restarts = 0; restarts < 3; ++restarts) {
    RestartDecision d = DecideRestart(policy, "worker-1", 1, restarts);
    EXPECT_TRUE(d.restart) << "after " << restarts << " restarts";
    EXPECT_EQ(d.code, "Restarting");
    EXPECT_THAT(d.reason, HasSubstr("worker-1 exited with code 1"));
    EXPECT_THAT(d.reason, HasSubstr("restart " + std::to_string(restarts + 1) + " of at most 3"));
  }
  for (int restarts : {3, 4, 100}) {
    RestartDecision d = DecideRestart(policy, "worker-1", 1, restarts);
    EXPECT_FALSE(d.restart) << "after " << restarts << " restarts";
    EXPECT_EQ(d.code, "BackoffLimitExceeded");
    EXPECT_THAT(d.reason, HasSubstr("worker-1 exited with code 1"));
    EXPECT_THAT(d.reason, HasSubstr("backoffLimit 3"));
  }
  // Signals and program errors alike are retried under OnFailure.
  EXPECT_TRUE(DecideRestart(policy, "server-0", 137, 0).restart);
  EXPECT_TRUE(DecideRestart(policy, "server-0", 127, 0).restart);
}

TEST(RestartPolicyTest, BackoffLimitZeroNeverRestarts) {
  RestartDecision d = DecideRestart(Policy(api::RestartPolicy::kOnFailure, 0), "server-0", 137, 0);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.code, "BackoffLimitExceeded");
}

TEST(RestartPolicyTest, NeverNeverRestarts) {
  const auto policy = Policy(api::RestartPolicy::kNever, 100);
  for (int code : {1, 2, 127, 137, 143, 255}) {
    RestartDecision d = DecideRestart(policy, "worker-0", code, 0);
    EXPECT_FALSE(d.restart) << code;
    EXPECT_EQ(d.code, "RestartPolicyNever") << code;
    EXPECT_THAT(d.reason, HasSubstr("worker-0 exited with code " + std::to_string(code)));
    EXPECT_THAT(d.reason, HasSubstr("Never"));
  }
}

TEST(RestartPolicyTest, ExitCodeRetriesSignalsOnly) {
  EXPECT_TRUE(IsRetryableExitCode(137));  // SIGKILL: OOM kill, node drain
  EXPECT_TRUE(IsRetryableExitCode(143));  // SIGTERM: pod eviction
  EXPECT_TRUE(IsRetryableExitCode(128));
  EXPECT_TRUE(IsRetryableExitCode(0));  // a server's exit before the workers finished
  EXPECT_FALSE(IsRetryableExitCode(1));
  EXPECT_FALSE(IsRetryableExitCode(127));  // command not found
  EXPECT_FALSE(IsRetryableExitCode(2));

  const auto policy = Policy(api::RestartPolicy::kExitCode, 2);
  for (int code : {137, 143}) {
    RestartDecision d = DecideRestart(policy, "server-1", code, 0);
    EXPECT_TRUE(d.restart) << code;
    EXPECT_EQ(d.code, "Restarting");
    EXPECT_THAT(d.reason, HasSubstr("server-1 exited with code " + std::to_string(code)));
  }
  for (int code : {1, 127}) {
    RestartDecision d = DecideRestart(policy, "worker-3", code, 0);
    EXPECT_FALSE(d.restart) << code;
    EXPECT_EQ(d.code, "PermanentExitCode") << code;
    EXPECT_THAT(d.reason, HasSubstr("worker-3 exited with code " + std::to_string(code)));
    EXPECT_THAT(d.reason, HasSubstr("ExitCode"));
  }
  // Retryable codes still respect backoffLimit.
  RestartDecision d = DecideRestart(policy, "server-1", 137, 2);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.code, "BackoffLimitExceeded");
  EXPECT_THAT(d.reason, HasSubstr("server-1 exited with code 137"));
  EXPECT_THAT(d.reason, HasSubstr("2 restarts"));
}

}  // namespace
}  // namespace kubeps::controller
