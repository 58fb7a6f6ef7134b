#include "worker-agent/sidecar/step_metrics.h"

#include <cstdio>
#include <map>
#include <string>

#include "common/logging.h"

namespace kubeps::sidecar {
namespace {

std::map<std::string, std::string> RankLabel(int rank) { return {{"rank", std::to_string(rank)}}; }

}  // namespace

StepMetrics::StepMetrics(MetricsServer* metrics, int rank, int progress_interval_ms)
    : progress_interval_(progress_interval_ms),
      steps_total_(
          (metrics ? *metrics : NullMetrics())
              .Counter("kubeps_worker_steps_total", "Training steps completed", RankLabel(rank))),
      histograms_(metrics ? *metrics : NullMetrics(), RankLabel(rank)),
      rollbacks_total_((metrics ? *metrics : NullMetrics())
                           .Counter("kubeps_worker_rollbacks_total",
                                    "Times the job rolled back to a shard checkpoint",
                                    RankLabel(rank))) {}

void StepMetrics::StepCompleted(uint64_t next_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  steps_total_.Increment();
  histograms_.duration.Observe(std::chrono::duration<double>(now - last_step_).count());
  histograms_.exchange_wait.Observe(waited_);
  last_step_ = now;
  waited_ = 0;
  ++steps_;
  ++window_steps_;
  if (now - window_start_ < progress_interval_) return;
  // The built-in trainer's progress line, less what only the training
  // process knows (epoch, loss).
  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  char line[160];
  std::snprintf(line, sizeof line, "total_steps %llu steps/sec %.2f",
                static_cast<unsigned long long>(next_step), window_steps_ / seconds);
  PrintLine(line);
  window_start_ = now;
  window_steps_ = 0;
}

void StepMetrics::Waited(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  waited_ += seconds;
}

void StepMetrics::RolledBack(uint64_t resume_step) {
  rollbacks_total_.Increment();
  PrintLine("rolled back to step " + std::to_string(resume_step));
}

uint64_t StepMetrics::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_;
}

}  // namespace kubeps::sidecar
