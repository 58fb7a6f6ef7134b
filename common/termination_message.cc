#include "common/termination_message.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace kubeps {

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
