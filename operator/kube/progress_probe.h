// Reads a job's training progress from worker 0's own /metrics (the pod's
// IP, port "metrics"), for the Step and Steps/s printer columns of
// `kubectl get tj`, with the cpprestsdk client the operator already uses.
// Best effort: a worker that does not answer within 300 ms leaves the
// status as it was.
#ifndef KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_
#define KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_

#include <optional>
#include <string>

namespace kubeps::kube {

// kubeps_worker_steps_total of the worker serving metrics at host:port.
std::optional<double> ProbeSteps(const std::string& host, int port);

// The value of the first series named `metric` in a Prometheus text page.
std::optional<double> MetricValue(const std::string& page, const std::string& metric);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_PROGRESS_PROBE_H_
