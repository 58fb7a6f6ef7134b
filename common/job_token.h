// The job's token: the shared secret every request to a job's scheduler and
// shards carries (metadata kTokenMetadataKey), read from the file the
// operator mounts from the job's Secret (or `kubeps run` writes).
//
// It is treated as a secret: compared in constant time (OpenSSL's
// CRYPTO_memcmp), never logged or put in an error message, and refused when
// its file lets other users read it. It may change while the job runs: the
// file is read again when it is used and at least a second has passed, so a
// rotated Secret reaches a running job without a restart. The kubelet
// updates each pod's copy of a Secret on its own schedule (a minute or
// more apart), so for a grace period after a change a process keeps the
// previous token too: a client presents both, and a server accepts either.
// One rotation per grace period is safe; two in a row can refuse the pods
// that have not seen the first yet.
//
// Thread-safe: one JobToken is shared by every thread of a process.
#ifndef KUBEPS_COMMON_JOB_TOKEN_H_
#define KUBEPS_COMMON_JOB_TOKEN_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubeps {

struct JobTokenTiming {
  // How stale a token read from the file may be.
  std::chrono::milliseconds reread_after{1000};
  // How long the previous token is still presented and accepted after a change.
  std::chrono::milliseconds rotation_grace{std::chrono::minutes(5)};
};

class JobToken {
 public:
  using Clock = std::chrono::steady_clock;
  using Timing = JobTokenTiming;

  // No token: requests carry none and every request is accepted (a job
  // started without KUBEPS_TOKEN_FILE, the unit tests).
  static std::shared_ptr<JobToken> None();
  // A token that never changes (benchmarks, tests).
  static std::shared_ptr<JobToken> Fixed(std::string token);
  // Reads the token from `path`. An error, naming the file and never its
  // contents, when it cannot be read, holds no token, or is readable,
  // writable or executable by others or writable by its group. (Group read
  // is allowed: Kubernetes gives a Secret's files the pod's fsGroup.)
  static Status FromFile(const std::string& path, std::shared_ptr<JobToken>* out,
                         Timing timing = {});

  bool enabled() const { return enabled_; }

  // What a client sends: the current token and, within the grace period
  // after a change, the previous one. Empty when there is no token.
  std::vector<std::string> Presented();

  // Whether one of `presented` is the current token or, within the grace
  // period, the previous one. True when there is no token.
  bool Accepts(const std::vector<std::string_view>& presented);

 private:
  JobToken() = default;
  // Reads the file again when `reread_after` has passed; keeps the tokens it
  // has when the file cannot be read (a Secret update in progress).
  void RefreshLocked(Clock::time_point now);
  bool PreviousValidLocked(Clock::time_point now) const;

  bool enabled_ = false;
  std::string path_;  // empty for a fixed token
  Timing timing_;
  std::mutex mu_;
  std::string current_;
  std::string previous_;
  Clock::time_point changed_at_{};
  Clock::time_point read_at_{};
  std::string last_error_;  // of the last failed re-read, logged once
};

// Reads a token file: checks its mode, takes its first line without the
// line break. On success sets *token (never empty).
Status ReadTokenFile(const std::string& path, std::string* token);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_JOB_TOKEN_H_
