#include "common/termination_message.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace kubeps {
namespace {

constexpr const char* kJobStopped = "the scheduler stopped the job";
constexpr const char* kIncurableStops[] = {kReasonNoCommonCheckpoint, kReasonProgramStateMissing};
constexpr const char* kOwnEnds[] = {kReasonJoinFailed, kReasonReplaced};

}  // namespace

std::string JobStoppedMessage(const std::string& reason, const std::string& failure) {
  return std::string(kJobStopped) + (reason.empty() ? "" : " (" + reason + ")") + ": " + failure;
}

const char* JobStopReason(const std::string& said, const char* otherwise) {
  for (const char* reason : kIncurableStops)
    if (said == reason) return reason;
  return otherwise;
}

bool IsOwnEnd(const std::string& reason) {
  for (const char* own : kOwnEnds)
    if (reason == own) return true;
  return false;
}

const char* EndReason(const std::string& said, const char* otherwise) {
  for (const char* own : kOwnEnds)
    if (said == own) return own;
  return JobStopReason(said, otherwise);
}

std::string TerminationLogPath(const char* pod_default) {
  const char* named = std::getenv(kTerminationLogVariable);
  if (named && *named) return named;
  const char* in_pod = std::getenv("KUBERNETES_SERVICE_HOST");
  if (in_pod && *in_pod && ::access(pod_default, F_OK) == 0) return pod_default;
  return "";
}

void WriteTerminationMessage(const std::string& reason, const std::string& message) {
  const std::string path = TerminationLogPath();
  if (path.empty()) return;
  std::ofstream out(path, std::ios::trunc);
  if (out) out << reason << ": " << message << "\n";
}

}  // namespace kubeps
