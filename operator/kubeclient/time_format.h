// Kubernetes time stamps: RFC 3339 in UTC, "2026-11-22T01:02:03Z", and
// MicroTime "2026-11-22T01:02:03.000000Z" for leases.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_TIME_FORMAT_H_
#define KUBEPS_OPERATOR_KUBECLIENT_TIME_FORMAT_H_

#include <chrono>
#include <string>

namespace kubeps::kube {

std::string Rfc3339(std::chrono::system_clock::time_point t);
std::string MicroTime(std::chrono::system_clock::time_point t);
// The epoch when `text` does not parse.
std::chrono::system_clock::time_point ParseTime(const std::string& text);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_TIME_FORMAT_H_
