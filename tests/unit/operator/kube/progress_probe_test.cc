// The operator's look at a worker's progress (operator/kube/progress_probe.h):
// an HTTP GET of the worker pod's metrics at its pod IP, IPv4 or IPv6.
#include "operator/kube/progress_probe.h"

#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "api/training_progress.h"
#include "common/metrics.h"

namespace kubeps::kube {
namespace {

TEST(ProgressProbeTest, ReadsTheStepsAtAnIpv4OrIpv6PodIp) {
  for (const std::string pod_ip : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(pod_ip);
    std::unique_ptr<MetricsServer> worker;
    Status s = MetricsServer::Start(pod_ip, 0, {{"role", "worker"}}, &worker);
    ASSERT_TRUE(s.ok()) << s.message();
    worker->Counter("kubeps_worker_steps_total", "Steps").Increment(42);
    std::optional<WorkerProgress> progress = ProbeProgress(pod_ip, worker->port());
    ASSERT_TRUE(progress.has_value());
    EXPECT_EQ(progress->step, 42);
  }
}

TEST(ProgressProbeTest, NothingWhereNothingAnswers) {
  std::unique_ptr<MetricsServer> gone;
  ASSERT_TRUE(MetricsServer::Start("::1", 0, {}, &gone).ok());
  const int port = gone->port();
  gone.reset();
  EXPECT_FALSE(ProbeProgress("::1", port).has_value());
}

// An elastic job's scheduler serves the ranks that compute its newest step
// as gauges at 1, and those that left at 0; a scheduler that has said
// nothing yet names none (not an empty set: every worker would be stopped).
TEST(ProgressProbeTest, ReadsTheRanksTheSchedulerSaysCompute) {
  std::unique_ptr<MetricsServer> scheduler;
  ASSERT_TRUE(MetricsServer::Start("127.0.0.1", 0, {{"node_rank", "9"}}, &scheduler).ok());
  EXPECT_EQ(ProbeComputingWorkers("127.0.0.1", scheduler->port()), std::nullopt);
  auto rank = [&](int r) -> prometheus::Gauge& {
    return scheduler->Gauge(api::kComputingWorkerMetric, "computes", {{"rank", std::to_string(r)}});
  };
  for (int r : {0, 1, 2, 10}) rank(r).Set(1);
  rank(2).Set(0);
  EXPECT_EQ(ProbeComputingWorkers("127.0.0.1", scheduler->port()), (std::vector<int>{0, 1, 10}));
}

}  // namespace
}  // namespace kubeps::kube
