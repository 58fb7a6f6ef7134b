// Status: the result of an operation that can fail, with a code callers can
// test and a message that says what failed and where. Modelled on LevelDB's
// Status (and the canonical codes of gRPC and abseil); cheap when ok.
// [[nodiscard]]: a dropped result is a compile warning (an error in this
// build). A Status is a value: copy it freely; not synchronised.
#ifndef KUBEPS_COMMON_STATUS_H_
#define KUBEPS_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace kubeps {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk,
    kUnknown,          // a failure with no more specific code
    kInvalidArgument,  // bad input: a manifest, a flag, an RPC field
    kNotFound,
    kAlreadyExists,
    kConflict,     // a stale write (HTTP 409 on a resourceVersion)
    kAborted,      // the job rolled back to an earlier step: resume from it
    kUnavailable,  // the peer could not be reached, even after resends
    kPermissionDenied,
    kGone,                // history compacted away (HTTP 410), a file freed: ask again
    kFailedPrecondition,  // a call out of order (before its setup, or twice)
    kInternal,            // a broken invariant, or a peer that broke its protocol
    kResourceExhausted,   // over a quota: waits until it frees
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(Code::kUnknown, std::move(message)); }
  static Status InvalidArgument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
  static Status Conflict(std::string m) { return Status(Code::kConflict, std::move(m)); }
  // The job rolled back (a shard restarted from its checkpoint): not a
  // failure, the caller resumes from the step the scheduler announces.
  static Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status PermissionDenied(std::string m) {
    return Status(Code::kPermissionDenied, std::move(m));
  }
  static Status Gone(std::string m) { return Status(Code::kGone, std::move(m)); }
  static Status FailedPrecondition(std::string m) {
    return Status(Code::kFailedPrecondition, std::move(m));
  }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
  static Status ResourceExhausted(std::string m) {
    return Status(Code::kResourceExhausted, std::move(m));
  }
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsAborted() const { return code_ == Code::kAborted; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsConflict() const { return code_ == Code::kConflict; }
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }

  // What a caller acts on beyond the code, apart from the words (as
  // google.rpc.ErrorInfo's reason): the scheduler's reason for stopping the
  // job (termination_message.h), which decides how the replica ends. ""
  // where none; Prefixed keeps it, where a new Status from the message
  // would lose it.
  const std::string& reason() const { return reason_; }
  Status WithReason(std::string reason) && {
    reason_ = std::move(reason);
    return std::move(*this);
  }
  // The same failure, its message led by where it happened ("step 12: ").
  Status Prefixed(const std::string& where) const {
    Status s(code_, where + message_);
    s.reason_ = reason_;
    return s;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::string reason_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_STATUS_H_
