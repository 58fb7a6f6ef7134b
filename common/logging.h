// Line-oriented logging. Every line carries the process's tag (role and
// rank, e.g. "worker 1"), so the interleaved output of a local job stays
// readable. Lines are written whole, under a lock, with one write().
//
// Thread-safe: a LogLine belongs to the thread that builds it; writing it out
// takes the process-wide output lock.
#ifndef KUBEPS_COMMON_LOGGING_H_
#define KUBEPS_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace kubeps {

void SetLogTag(const std::string& tag);
const std::string& LogTag();

// Writes "[tag] message\n" to stdout (progress, results) or stderr (problems).
void PrintLine(const std::string& message);
void PrintError(const std::string& message);

class LogLine {
 public:
  explicit LogLine(bool error) : error_(error) {}
  ~LogLine() { error_ ? PrintError(stream_.str()) : PrintLine(stream_.str()); }
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  bool error_;
  std::ostringstream stream_;
};

}  // namespace kubeps

#define KLOG_INFO ::kubeps::LogLine(false)
#define KLOG_ERROR ::kubeps::LogLine(true)

#endif  // KUBEPS_COMMON_LOGGING_H_
