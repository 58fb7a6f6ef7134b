#include "common/metrics.h"

namespace kubeps {

Status MetricsServer::Start(const std::string& bind_address, int port,
                            std::map<std::string, std::string> constant_labels,
                            std::unique_ptr<MetricsServer>* out) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->labels_ = std::move(constant_labels);
  if (port >= 0) {
    Status s =
        HttpMetricsEndpoint::Start(bind_address, port, server->registry_, &server->endpoint_);
    if (!s.ok()) return s;
    server->port_ = server->endpoint_->port();
  }
  *out = std::move(server);
  return Status::Ok();
}

std::map<std::string, std::string> MetricsServer::Merge(
    const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> all = labels_;
  all.insert(extra.begin(), extra.end());
  return all;
}

prometheus::Counter& MetricsServer::Counter(const std::string& name, const std::string& help,
                                            const std::map<std::string, std::string>& extra) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(Merge(extra));
}

prometheus::Gauge& MetricsServer::Gauge(const std::string& name, const std::string& help,
                                        const std::map<std::string, std::string>& extra) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add(Merge(extra));
}

prometheus::Histogram& MetricsServer::Latency(const std::string& name, const std::string& help,
                                              const std::map<std::string, std::string>& extra) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(*registry_)
      .Add(Merge(extra), kBuckets);
}

StepHistograms::StepHistograms(MetricsServer& metrics,
                               const std::map<std::string, std::string>& rank)
    : duration(metrics.Latency("kubeps_worker_step_duration_seconds",
                               "Wall time of one step: compute, push and pull", rank)),
      exchange_wait(metrics.Latency(
          "kubeps_worker_exchange_wait_seconds",
          "Time of one step the worker waited for its pushes and pulls instead of computing",
          rank)) {}

MetricsServer& NullMetrics() {
  static std::unique_ptr<MetricsServer> null_metrics = [] {
    std::unique_ptr<MetricsServer> server;
    // Port -1 binds nothing, so this cannot fail.
    [[maybe_unused]] Status started = MetricsServer::Start("", -1, {}, &server);
    return server;
  }();
  return *null_metrics;
}

}  // namespace kubeps
