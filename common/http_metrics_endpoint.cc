#include "common/http_metrics_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include <prometheus/text_serializer.h>

#include "common/host_port.h"

namespace kubeps {
namespace {

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Response(const char* status, const char* type, const std::string& body) {
  std::ostringstream out;
  out << "HTTP/1.1 " << status << "\r\nContent-Type: " << type
      << "\r\nContent-Length: " << body.size() << "\r\nConnection: close\r\n\r\n"
      << body;
  return out.str();
}

}  // namespace

Status HttpMetricsEndpoint::Start(const std::string& bind_address, int port,
                                  std::shared_ptr<prometheus::Registry> registry,
                                  std::unique_ptr<HttpMetricsEndpoint>* out) {
  std::unique_ptr<HttpMetricsEndpoint> endpoint(new HttpMetricsEndpoint());
  endpoint->registry_ = std::move(registry);
  const std::string where = JoinHostPort(bind_address, port);
  // "" and "0.0.0.0" mean every IPv4 address, "::" every address; otherwise
  // the pod's own address, IPv4 or IPv6 (a single-stack IPv6 pod has no
  // other). Numeric only: a name could resolve to something else than the
  // address the pod reports.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  const std::string host = Unbracketed(bind_address);
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.empty() ? "0.0.0.0" : host.c_str(), std::to_string(port).c_str(), &hints,
                    &found) != 0 ||
      found == nullptr) {
    return Status::Error("metrics: \"" + bind_address + "\" is not an IPv4 or IPv6 address");
  }
  sockaddr_storage address{};
  socklen_t length = found->ai_addrlen;
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  const int family = found->ai_family;
  ::freeaddrinfo(found);
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(fd, 16) != 0) {
    std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return Status::Error("metrics: cannot listen on " + where + ": " + reason);
  }
  length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const in_port_t bound_port = family == AF_INET6
                                   ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&address)->sin_port;
  endpoint->listen_fd_ = fd;
  endpoint->port_ = ntohs(bound_port);
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->Serve(); });
  *out = std::move(endpoint);
  return Status::Ok();
}

HttpMetricsEndpoint::~HttpMetricsEndpoint() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpMetricsEndpoint::Serve() {
  while (!stopping_) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (::poll(&waiting, 1, 100) <= 0) continue;  // wakes up to notice stopping_
    int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    ::close(connection);
  }
}

void HttpMetricsEndpoint::Answer(int connection) {
  // Read the request head (bounded, with a timeout: a slow client cannot
  // hold the endpoint for long).
  timeval timeout{2, 0};
  ::setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    ssize_t n = ::recv(connection, buffer, sizeof buffer, 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  if (line.rfind("GET /metrics", 0) == 0) {
    std::ostringstream body;
    prometheus::TextSerializer().Serialize(body, registry_->Collect());
    SendAll(connection, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body.str()));
  } else if (line.rfind("GET /healthz", 0) == 0) {
    SendAll(connection, Response("200 OK", "text/plain", "ok\n"));
  } else if (line.rfind("GET /readyz", 0) == 0) {
    bool ready = true;
    {
      std::lock_guard<std::mutex> lock(ready_mutex_);
      if (ready_) ready = ready_();
    }
    SendAll(connection, ready ? Response("200 OK", "text/plain", "ok\n")
                              : Response("503 Service Unavailable", "text/plain", "not ready\n"));
  } else {
    SendAll(connection, Response("404 Not Found", "text/plain", "try /metrics\n"));
  }
}

}  // namespace kubeps
