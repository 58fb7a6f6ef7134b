// Kubernetes time stamps, through abseil's time library: metav1.Time is
// RFC 3339 in UTC to the second ("2026-11-22T01:02:03Z"), metav1.MicroTime
// (leases) to the microsecond ("2026-11-22T01:02:03.000000Z"). Pure
// functions: safe from any thread.
#ifndef KUBEPS_COMMON_TIME_FORMAT_H_
#define KUBEPS_COMMON_TIME_FORMAT_H_

#include <chrono>
#include <string>

namespace kubeps {

std::string Rfc3339(std::chrono::system_clock::time_point t);
std::string MicroTime(std::chrono::system_clock::time_point t);
// Either form (any RFC 3339 time); the epoch when `text` does not parse.
std::chrono::system_clock::time_point ParseTime(const std::string& text);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_TIME_FORMAT_H_
