#include "operator/controller/restart_policy.h"

#include <cctype>

#include "common/termination_message.h"
#include "operator/controller/cluster.h"

namespace kubeps::controller {

bool IsPermanentReason(const std::string& reason) {
  return reason == kReasonNonFiniteLoss || reason == kReasonNonFiniteGradient ||
         reason == kReasonCheckpointWriteFailed || reason == kReasonShardStateLost ||
         reason == kReasonDatasetNotFound || reason == kReasonDatasetUnreadable ||
         reason == kReasonModelMismatch || reason == kReasonCheckpointFolderInUse ||
         reason == kReasonProgramStateMissing || reason == kReasonCheckpointMismatch ||
         reason == kReasonNoCommonCheckpoint;
}

namespace {

// The last line of `text` with something on it: the tail of a log
// (FallbackToLogsOnError) ends with what the process said last, its error.
std::string LastLine(const std::string& text) {
  const size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  const size_t newline = text.rfind('\n', end);
  const size_t start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end + 1 - start);
}

}  // namespace

void ParseTerminationMessage(const std::string& text, std::string* reason, std::string* message) {
  std::string line = text.substr(0, text.find('\n'));
  const size_t colon = line.find(": ");
  bool camel =
      colon != std::string::npos && colon > 0 && std::isupper(static_cast<unsigned char>(line[0]));
  for (size_t i = 0; camel && i < colon; ++i)
    camel = std::isalnum(static_cast<unsigned char>(line[i]));
  reason->assign(camel ? line.substr(0, colon) : "");
  message->assign(camel ? line.substr(colon + 2) : LastLine(text));
}

bool IsRetryableExitCode(int exit_code) { return exit_code == 0 || exit_code >= 128; }

namespace {

// `failed` restarted while backoffLimit allows.
RestartDecision WithinBackoffLimit(const api::RunPolicy& policy, const std::string& failed,
                                   int restarts_so_far) {
  if (restarts_so_far >= policy.backoff_limit) {
    return {false, "BackoffLimitExceeded",
            failed + "; backoffLimit " + std::to_string(policy.backoff_limit) + " reached after " +
                std::to_string(restarts_so_far) + " restarts"};
  }
  return {true, "Restarting",
          failed + "; restarting it (restart " + std::to_string(restarts_so_far + 1) +
              " of at most " + std::to_string(policy.backoff_limit) + ")"};
}

}  // namespace

RestartDecision DecideRestartAfterRejection(const api::RunPolicy& policy,
                                            const std::string& replica, int restarts_so_far) {
  return WithinBackoffLimit(policy, replica + " was rejected by its node before it ran",
                            restarts_so_far);
}

RestartDecision DecideRestart(const api::RunPolicy& policy, const std::string& replica,
                              int exit_code, int restarts_so_far) {
  const std::string failed = replica + " exited with code " + std::to_string(exit_code) +
                             (exit_code == 0 ? " before the workers finished" : "");
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
  return WithinBackoffLimit(policy, failed, restarts_so_far);
}

}  // namespace kubeps::controller
