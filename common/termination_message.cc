#include "common/termination_message.h"

#include <cstdlib>
#include <fstream>

namespace kubeps {

void WriteTerminationMessage(const std::string& reason, const std::string& message) {
  const char* path = std::getenv(kTerminationLogVariable);
  std::ofstream out(path && *path ? path : "/dev/termination-log", std::ios::trunc);
  if (out) out << reason << ": " << message << "\n";
}

}  // namespace kubeps
