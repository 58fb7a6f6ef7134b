#include "common/desired_workers.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace kubeps {

std::optional<int> DesiredWorkersFile::Changed() {
  if (path_.empty()) return std::nullopt;
  std::ifstream in(path_);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  if (value.empty() || value == last_) return std::nullopt;
  last_ = value;
  errno = 0;
  char* end = nullptr;
  const long workers = std::strtol(value.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || workers < 1 || workers > 1000000) {
    KLOG_ERROR << path_ << " holds \"" << value
               << "\": want the number of workers the job should have, a whole number from 1";
    return std::nullopt;
  }
  return static_cast<int>(workers);
}

}  // namespace kubeps
