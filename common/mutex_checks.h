// Turns off Abseil's deadlock detection for the process, in the servers' and
// the agent's main(), where gRPC's locks are hot.
//
// Why: gRPC locks absl::Mutex many times per call, and Debian's Abseil is
// built without NDEBUG, so every lock taken while another is held also
// records the pair in a graph of lock orders, with a stack trace, to find a
// cycle: 83 against 24 ns per nested pair of locks on this machine. That
// graph showed up in the 2 x 2 CNN job's profile, on every request. kubeps'
// own locks are std::mutex, which never had the check, and the tests, which
// do not call this, keep it for gRPC's. Not done in libkubeps.so: a user's
// process decides for itself.
#ifndef KUBEPS_COMMON_MUTEX_CHECKS_H_
#define KUBEPS_COMMON_MUTEX_CHECKS_H_

#include <absl/synchronization/mutex.h>

namespace kubeps {

inline void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace kubeps

#endif  // KUBEPS_COMMON_MUTEX_CHECKS_H_
