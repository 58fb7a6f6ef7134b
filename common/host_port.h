// Network addresses as "host:port" text, for IPv4, IPv6 and DNS names alike.
//
// An IPv6 literal holds colons of its own, so inside an address it goes in
// brackets: "[fd00::1]:443" (RFC 3986, section 3.2.2). gRPC, HTTP clients and
// the scheduler's cluster view all need that form, and a pod on a
// single-stack IPv6 cluster has only such an address. Every place that joins
// a host and a port, or takes an address apart, does it through these
// functions, so none of them forgets the brackets.
#ifndef KUBEPS_COMMON_HOST_PORT_H_
#define KUBEPS_COMMON_HOST_PORT_H_

#include <string>

#include "common/status.h"

namespace kubeps {

// "host:port", with an IPv6 literal (any host holding a colon) in brackets:
// ("10.0.0.7", 5000) -> "10.0.0.7:5000", ("fd00::7", 5000) -> "[fd00::7]:5000".
// A host already in brackets is kept as it is.
std::string JoinHostPort(const std::string& host, int port);
// The same with the port as text (as KUBERNETES_SERVICE_PORT gives it).
std::string JoinHostPort(const std::string& host, const std::string& port);

// Takes "host:port" or "[ipv6]:port" apart; *host comes back without
// brackets. InvalidArgument, naming the address, for an empty host, a
// missing port, a port outside 0..65535, or an IPv6 literal without
// brackets ("fd00::1:443" could be several addresses).
Status SplitHostPort(const std::string& address, std::string* host, int* port);

// The host as a resolver or a socket wants it: "[::1]" -> "::1"; any other
// host is returned unchanged.
std::string Unbracketed(const std::string& host);

// True for a host that is an IPv6 literal, with or without brackets.
bool IsIpv6Literal(const std::string& host);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_HOST_PORT_H_
