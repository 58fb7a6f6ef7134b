// Status: the result of an operation that can fail, with a message that says
// what failed and where. Modelled on LevelDB's Status; cheap when ok.
#ifndef KUBEPS_COMMON_STATUS_H_
#define KUBEPS_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace kubeps {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }
  // The job rolled back to an earlier step (a shard restarted from its
  // checkpoint): not a failure, the caller resumes from that step.
  static Status RolledBack(std::string message) {
    Status s(std::move(message));
    s.rolled_back_ = true;
    return s;
  }

  bool ok() const { return !failed_; }
  bool rolled_back() const { return rolled_back_; }
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  bool rolled_back_ = false;
  std::string message_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_STATUS_H_
