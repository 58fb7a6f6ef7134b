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
#include <cstdint>
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

}  // namespace kubeps

#endif  // KUBEPS_COMMON_LONG_POLL_H_
