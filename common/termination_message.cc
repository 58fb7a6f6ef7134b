#include "common/termination_message.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace kubeps {

void WriteTerminationMessage(const std::string& reason, const std::string& message) {
  const char* variable = std::getenv(kTerminationLogVariable);
  const std::string path = variable && *variable ? variable : "/dev/termination-log";
  // A pod has the default file (the kubelet makes it); a process run by
  // hand has none and needs none: it is not created there.
  if (!(variable && *variable) && ::access(path.c_str(), F_OK) != 0) return;
  std::ofstream out(path, std::ios::trunc);
  if (out) out << reason << ": " << message << "\n";
}

}  // namespace kubeps
