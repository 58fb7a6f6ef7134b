// The operator's look at a worker's progress (operator/kube/progress_probe.h):
// an HTTP GET of the worker pod's metrics at its pod IP, IPv4 or IPv6.
#include "operator/kube/progress_probe.h"

#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kubeps::kube
