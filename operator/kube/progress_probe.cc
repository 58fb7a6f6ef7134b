#include "operator/kube/progress_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>

#include "common/host_port.h"

#include "api/training_progress.h"

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

std::optional<WorkerProgress> ParseWorkerProgress(const std::string& page) {
  std::optional<double> step = MetricValue(page, api::kStepMetric);
  if (!step) step = MetricValue(page, "kubeps_worker_steps_total");
  if (!step) return std::nullopt;
  WorkerProgress progress;
  progress.step = *step;
  progress.total_steps = MetricValue(page, api::kTotalStepsMetric);
  progress.loss = MetricValue(page, api::kLossMetric);
  return progress;
}

std::optional<std::string> FetchMetrics(const std::string& host, int port) {
  web::http::client::http_client_config config;
  config.set_timeout(std::chrono::milliseconds(300));
  try {
    // The pod IP goes in bare: cpprestsdk would hand a bracketed IPv6
    // literal to the resolver as it is, and fail. The Host header, which it
    // would then write without brackets, is given in the proper form.
    web::uri_builder uri;
    uri.set_scheme(U("http")).set_host(Unbracketed(host)).set_port(port);
    web::http::client::http_client client(uri.to_uri(), config);
    web::http::http_request request(web::http::methods::GET);
    request.set_request_uri(U("/metrics"));
    request.headers().add(U("Host"), JoinHostPort(host, port));
    web::http::http_response response = client.request(request).get();
    if (response.status_code() != web::http::status_codes::OK) return std::nullopt;
    return utility::conversions::to_utf8string(response.extract_string().get());
  } catch (const std::exception&) {
    return std::nullopt;  // not answering yet, or gone: best effort
  }
}

std::optional<WorkerProgress> ProbeProgress(const std::string& host, int port) {
  std::optional<std::string> page = FetchMetrics(host, port);
  return page ? ParseWorkerProgress(*page) : std::nullopt;
}

std::optional<std::vector<int>> ParseComputingWorkers(const std::string& page) {
  // kubeps_job_worker_computing{...,rank="2",...} 1
  const std::string metric = std::string(api::kComputingWorkerMetric) + "{";
  std::istringstream lines(page);
  std::string line;
  std::optional<std::vector<int>> ranks;
  while (std::getline(lines, line)) {
    if (line.rfind(metric, 0) != 0) continue;
    size_t label = line.find("rank=\"");
    while (label != std::string::npos && line[label - 1] != '{' && line[label - 1] != ',')
      label = line.find("rank=\"", label + 1);  // another label ending in "rank"
    const size_t space = line.rfind(' ');
    if (label == std::string::npos || space == std::string::npos) continue;
    if (!ranks) ranks.emplace();
    if (std::strtod(line.c_str() + space + 1, nullptr) == 1)
      ranks->push_back(std::atoi(line.c_str() + label + 6));
  }
  if (ranks) std::sort(ranks->begin(), ranks->end());
  return ranks;
}

std::optional<std::vector<int>> ProbeComputingWorkers(const std::string& host, int port) {
  std::optional<std::string> page = FetchMetrics(host, port);
  return page ? ParseComputingWorkers(*page) : std::nullopt;
}

}  // namespace kubeps::kube
