#include "operator/controller/restart_policy.h"

namespace kubeps::controller {

bool IsRetryableExitCode(int exit_code) { return exit_code >= 128; }

RestartDecision DecideRestart(const api::RunPolicy& policy, const std::string& replica,
                              int exit_code, int restarts_so_far) {
  const std::string failed = replica + " exited with code " + std::to_string(exit_code);
  switch (policy.restart_policy) {
    case api::RestartPolicy::kNever:
      return {false, "RestartPolicyNever", failed + " and restartPolicy is Never"};
    case api::RestartPolicy::kExitCode:
      if (!IsRetryableExitCode(exit_code)) {
        return {
            false, "PermanentExitCode",
            failed + ", a permanent error under restartPolicy ExitCode (1-127 are not retried)"};
      }
      break;
    case api::RestartPolicy::kOnFailure:
      break;
  }
  if (restarts_so_far >= policy.backoff_limit) {
    return {false, "BackoffLimitExceeded",
            failed + "; backoffLimit " + std::to_string(policy.backoff_limit) + " reached after " +
                std::to_string(restarts_so_far) + " restarts"};
  }
  return {true, "Restarting",
          failed + "; restarting it (restart " + std::to_string(restarts_so_far + 1) +
              " of at most " + std::to_string(policy.backoff_limit) + ")"};
}

}  // namespace kubeps::controller
