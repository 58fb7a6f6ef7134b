// Prometheus metrics over HTTP (prometheus-cpp's registry and text format,
// served by common/http_metrics_endpoint.h). Each process owns one
// MetricsServer; components register their metric families on its registry.
// Every series carries the constant labels job, role and rank.
//
// Thread-safe once constructed: prometheus-cpp's metrics are updated from any
// thread; families are registered at start-up.
#ifndef KUBEPS_COMMON_METRICS_H_
#define KUBEPS_COMMON_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/http_metrics_endpoint.h"
#include "common/status.h"

namespace kubeps {

class MetricsServer {
 public:
  // Serves /metrics on `bind_address`:`port` (port 0 picks a free one; a
  // negative port serves nothing, the metrics are only kept).
  static Status Start(const std::string& bind_address, int port,
                      std::map<std::string, std::string> constant_labels,
                      std::unique_ptr<MetricsServer>* out);

  int port() const { return port_; }
  // The HTTP endpoint, null when nothing is served.
  HttpMetricsEndpoint* endpoint() { return endpoint_.get(); }
  prometheus::Registry& registry() { return *registry_; }
  const std::map<std::string, std::string>& labels() const { return labels_; }

  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const std::map<std::string, std::string>& extra = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const std::map<std::string, std::string>& extra = {});
  // Latency histogram in seconds, buckets from 100 us to 10 s.
  prometheus::Histogram& Latency(const std::string& name, const std::string& help,
                                 const std::map<std::string, std::string>& extra = {});

 private:
  MetricsServer() = default;
  std::map<std::string, std::string> Merge(const std::map<std::string, std::string>& extra) const;

  std::unique_ptr<HttpMetricsEndpoint> endpoint_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::map<std::string, std::string> labels_;
  int port_ = 0;
};

// A worker's histograms of its steps, under one name and help wherever its
// steps are counted: the built-in trainer's loop, or the sidecar for the
// job's own program.
struct StepHistograms {
  StepHistograms(MetricsServer& metrics, const std::map<std::string, std::string>& rank);
  prometheus::Histogram& duration;       // wall time of a step
  prometheus::Histogram& exchange_wait;  // of it, blocked on its pushes and pulls
};

// A registry with no HTTP server, for tests and for code that runs without
// a MetricsServer; metrics recorded there are simply not exported.
MetricsServer& NullMetrics();

}  // namespace kubeps

#endif  // KUBEPS_COMMON_METRICS_H_
