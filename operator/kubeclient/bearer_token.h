// The bearer token the client presents, re-read from its file as it rotates.
//
// Service-account tokens are projected into the pod and rotated by the
// kubelet (by default about every hour; they expire soon after), and a
// kubeconfig's `tokenFile` may be refreshed by an outside tool the same way.
// client-go re-reads such a file at most a minute after it last did, and
// at once when the API server answers 401; so does this class. A token given
// inline (kubeconfig `token:`) never changes.
//
// Thread-safe: the informers, the lease and the reconcile worker share one.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_BEARER_TOKEN_H_
#define KUBEPS_OPERATOR_KUBECLIENT_BEARER_TOKEN_H_

#include <chrono>
#include <mutex>
#include <string>

#include "common/status.h"

namespace kubeps::kube {

// Reads a token file: its content without surrounding white space. An empty
// or unreadable file is an error naming the path.
Status ReadTokenFile(const std::string& path, std::string* token);

class BearerToken {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kRereadPeriod{60};

  // `token` is the value read at start-up; `file` (may be empty) is where
  // newer ones appear.
  BearerToken(std::string token, std::string file, Clock::duration reread_period = kRereadPeriod);

  // The token to send now: re-read from the file when the last read is older
  // than the period. A file that cannot be read keeps the last good token
  // (the kubelet swaps the file atomically, but an outside tool may not).
  std::string Get();

  // After a 401 to a request sent with `refused`: reads the file now. True
  // when the token is no longer `refused` (this read, or a concurrent
  // request's, found a newer one), so the request is worth sending again.
  bool ReloadAfterRefusal(const std::string& refused);

  const std::string& file() const { return file_; }

 private:
  void ReadLocked();

  const std::string file_;
  const Clock::duration period_;
  std::mutex mu_;
  std::string token_;
  Clock::time_point last_read_;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_BEARER_TOKEN_H_
