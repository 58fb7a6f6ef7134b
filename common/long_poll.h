// Bounds of a long-polling call (a Pull waiting for a version, a Barrier):
// the wait a client may ask for, and the slice a waiting handler sleeps
// before it looks again at whether its call was cancelled or its server is
// stopping. A client asks for short waits and asks again (the KV client's
// pull_wait_ms, the scheduler client's long_poll_ms); a server that honoured
// any uint32 wait (49 days) could not end until killed, so a longer one is
// refused outright.
#ifndef KUBEPS_COMMON_LONG_POLL_H_
#define KUBEPS_COMMON_LONG_POLL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include <grpcpp/support/status.h>

namespace kubeps {

constexpr uint32_t kMaxLongPollMs = 60000;
constexpr std::chrono::milliseconds kLongPollSlice(100);

// INVALID_ARGUMENT naming `call` when `wait_ms` is over kMaxLongPollMs.
inline grpc::Status CheckLongPollWait(const char* call, uint32_t wait_ms) {
  if (wait_ms <= kMaxLongPollMs) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      std::string(call) + ": wait_ms " + std::to_string(wait_ms) +
                          " is over the bound of " + std::to_string(kMaxLongPollMs) + " ms");
}

enum class LongPollEnd { kReady, kTimedOut, kCancelled };

// Waits on `cv` (with `lock` held) until `ready()`, `wait_ms` passes, or
// `cancelled()` (may be empty) turns true, looking at the last between
// slices of kLongPollSlice: a cancelled call's handler must return for its
// server to shut down. A server that is stopping makes `ready()` true.
template <typename Ready>
LongPollEnd WaitLongPoll(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         uint32_t wait_ms, Ready ready, const std::function<bool()>& cancelled) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!ready()) {
    if (cancelled && cancelled()) return LongPollEnd::kCancelled;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return LongPollEnd::kTimedOut;
    cv.wait_until(lock, std::min(deadline, now + kLongPollSlice));
  }
  return LongPollEnd::kReady;
}

}  // namespace kubeps

#endif  // KUBEPS_COMMON_LONG_POLL_H_
