#include "operator/kube/progress_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace kubeps::kube {

std::optional<double> MetricValue(const std::string& page, const std::string& metric) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(metric, 0) != 0) continue;
    const char next = line.size() > metric.size() ? line[metric.size()] : '\0';
    if (next != '{' && next != ' ') continue;  // a longer name with this prefix
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    char* end = nullptr;
    double value = std::strtod(line.c_str() + space + 1, &end);
    if (end != line.c_str() + space + 1) return value;
  }
  return std::nullopt;
}

std::optional<double> ProbeSteps(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) return std::nullopt;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{0, 300000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string page;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buffer[8192];
      ssize_t n;
      while (page.size() < (4 << 20) && (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) page.append(buffer, n);
    }
  }
  ::close(fd);
  return MetricValue(page, "kubeps_worker_steps_total");
}

}  // namespace kubeps::kube
