#include "common/host_port.h"

#include <arpa/inet.h>

#include <charconv>

namespace kubeps {

namespace {

bool InBrackets(const std::string& host) {
  return host.size() >= 2 && host.front() == '[' && host.back() == ']';
}

}  // namespace

std::string Unbracketed(const std::string& host) {
  return InBrackets(host) ? host.substr(1, host.size() - 2) : host;
}

bool IsIpv6Literal(const std::string& host) {
  in6_addr ignored;
  // A zone ("fe80::1%eth0") is not part of what inet_pton reads.
  const std::string bare = Unbracketed(host);
  return ::inet_pton(AF_INET6, bare.substr(0, bare.find('%')).c_str(), &ignored) == 1;
}

std::string JoinHostPort(const std::string& host, const std::string& port) {
  // Any colon means the host cannot stand before ":port" as it is; only an
  // IPv6 literal holds one.
  if (host.find(':') != std::string::npos && !InBrackets(host)) {
    return "[" + host + "]:" + port;
  }
  return host + ":" + port;
}

std::string JoinHostPort(const std::string& host, int port) {
  return JoinHostPort(host, std::to_string(port));
}

Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const auto invalid = [&](const std::string& why) {
    return Status::InvalidArgument("address \"" + address + "\": " + why);
  };
  std::string host_part;
  std::string port_part;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) return invalid("'[' without ']'");
    host_part = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') {
      return invalid("no :port after the bracketed host");
    }
    port_part = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return invalid("no :port");
    host_part = address.substr(0, colon);
    port_part = address.substr(colon + 1);
    if (host_part.find(':') != std::string::npos) {
      return invalid("an IPv6 address needs brackets, as in [" + host_part + "]:" + port_part);
    }
  }
  if (host_part.empty()) return invalid("no host");
  int parsed = -1;
  const char* end = port_part.data() + port_part.size();
  auto [rest, error] = std::from_chars(port_part.data(), end, parsed);
  if (port_part.empty() || error != std::errc() || rest != end || parsed < 0 || parsed > 65535) {
    return invalid("the port must be a number from 0 to 65535");
  }
  *host = host_part;
  *port = parsed;
  return Status::Ok();
}

}  // namespace kubeps
