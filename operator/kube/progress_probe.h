// Reads a job's training progress from worker 0's own /metrics (the pod's
// IP, port "metrics"), for the Step, Steps/s, Progress, ETA and Loss
// columns of `kubectl get tj`, with the cpprestsdk client the operator
// already uses. Best effort: a worker that does not answer within 300 ms
// leaves the status as it was.
#ifndef KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_
#define KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_

#include <optional>
#include <string>
#include <vector>

namespace kubeps::kube {

// What a worker's metrics say of its training (api/training_progress.h).
struct WorkerProgress {
  double step = 0;                    // the global step
  std::optional<double> total_steps;  // of the whole job
  std::optional<double> loss;         // of the latest step
};

// The progress on a worker's metrics page; none without a step. A worker
// whose metrics name no global step (a job's own program, counted by its
// agent) gives its steps counter.
std::optional<WorkerProgress> ParseWorkerProgress(const std::string& page);

// The progress of the worker serving metrics at host:port.
std::optional<WorkerProgress> ProbeProgress(const std::string& host, int port);

// The ranks an elastic job's scheduler says compute its newest step
// (api::kComputingWorkerMetric at 1); none where its page names no rank.
std::optional<std::vector<int>> ParseComputingWorkers(const std::string& page);
// Those of the scheduler serving metrics at host:port.
std::optional<std::vector<int>> ProbeComputingWorkers(const std::string& host, int port);

// The metrics page served at host:port; none where it does not answer
// within 300 ms.
std::optional<std::string> FetchMetrics(const std::string& host, int port);

// The value of the first series named `metric` in a Prometheus text page.
std::optional<double> MetricValue(const std::string& page, const std::string& metric);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_
