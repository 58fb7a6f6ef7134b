#include "common/logging.h"

#include <unistd.h>

#include <mutex>

namespace kubeps {
namespace {

std::mutex& OutputMutex() {
  static std::mutex mutex;
  return mutex;
}

std::string& MutableTag() {
  static std::string tag = "kubeps";
  return tag;
}

void WriteLine(int fd, const std::string& message) {
  std::string line = "[" + MutableTag() + "] " + message + "\n";
  std::lock_guard<std::mutex> lock(OutputMutex());
  size_t written = 0;
  while (written < line.size()) {
    ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n <= 0) return;  // a closed pipe must not take the process down
    written += static_cast<size_t>(n);
  }
}

}  // namespace

void SetLogTag(const std::string& tag) { MutableTag() = tag; }
const std::string& LogTag() { return MutableTag(); }
void PrintLine(const std::string& message) { WriteLine(STDOUT_FILENO, message); }
void PrintError(const std::string& message) { WriteLine(STDERR_FILENO, message); }

}  // namespace kubeps
