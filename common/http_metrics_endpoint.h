// A minimal HTTP/1.1 server that answers GET /metrics with the Prometheus
// text format of a registry, GET /healthz with "ok" while the process
// serves, and GET /readyz with 200 or 503 as a readiness check says.
//
// Why not prometheus-cpp's Exposer: it runs civetweb, whose threads Debian
// builds with a 100 KiB stack, and glibc carves each thread's static TLS out
// of that stack. OpenBLAS alone has 60 KiB of TLS, so a scrape of any
// process that links it overflowed the stack and crashed the worker. This
// server uses ordinary threads (8 MiB stacks) and stays tiny: one request
// per connection, Connection: close, which is all Prometheus needs.
#ifndef KUBEPS_COMMON_HTTP_METRICS_ENDPOINT_H_
#define KUBEPS_COMMON_HTTP_METRICS_ENDPOINT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <prometheus/registry.h>

#include "common/status.h"

namespace kubeps {

class HttpMetricsEndpoint {
 public:
  // Listens on bind_address:port (port 0: any free port). bind_address is a
  // numeric IPv4 or IPv6 address ("[::1]" or "::1"); "" means 0.0.0.0.
  static Status Start(const std::string& bind_address, int port,
                      std::shared_ptr<prometheus::Registry> registry,
                      std::unique_ptr<HttpMetricsEndpoint>* out);
  ~HttpMetricsEndpoint();

  int port() const { return port_; }
  // /readyz answers 200 when `ready` returns true (always, when unset).
  void set_ready_check(std::function<bool()> ready) {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    ready_ = std::move(ready);
  }

 private:
  HttpMetricsEndpoint() = default;
  void Serve();
  void Answer(int connection);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex ready_mutex_;
  std::function<bool()> ready_;
  std::thread thread_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_HTTP_METRICS_ENDPOINT_H_
