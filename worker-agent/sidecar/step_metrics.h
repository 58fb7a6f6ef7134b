// The worker metrics of a training process behind the sidecar, under the
// names the built-in trainer exports (worker-agent/training_loop.cc), so the
// dashboards and alerts read both alike: steps, step time, rollbacks, and a
// progress line every interval. (Push and pull latency and bytes are the KV
// client's own.) A step is counted when a push_pull completes, or a pull
// that follows a completed push (the async loop: push, then pull). The
// time the program's wait requests blocked until then is the step's wait
// for its exchange.
//
// Thread-safe: sessions' requests complete on several threads.
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_STEP_METRICS_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_STEP_METRICS_H_

#include <chrono>
#include <cstdint>
#include <mutex>

#include "common/metrics.h"

namespace kubeps::sidecar {

class StepMetrics {
 public:
  // `metrics` may be null (nothing exported, progress lines still printed).
  StepMetrics(MetricsServer* metrics, int rank, int progress_interval_ms);

  // A step ended: the parameters of `next_step` are in the values regions.
  void StepCompleted(uint64_t next_step);
  // A wait request of the program blocked this long (seconds) on the exchange.
  void Waited(double seconds);
  void RolledBack(uint64_t resume_step);
  uint64_t steps() const;

 private:
  using Clock = std::chrono::steady_clock;

  const std::chrono::milliseconds progress_interval_;
  prometheus::Counter& steps_total_;
  StepHistograms histograms_;
  prometheus::Counter& rollbacks_total_;

  mutable std::mutex mutex_;
  uint64_t steps_ = 0;
  Clock::time_point last_step_ = Clock::now();
  double waited_ = 0;  // since last_step_
  Clock::time_point window_start_ = Clock::now();
  uint64_t window_steps_ = 0;
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_STEP_METRICS_H_
