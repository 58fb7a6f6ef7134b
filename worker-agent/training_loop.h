// The built-in trainer's loop: for every step, this worker's slice of the
// global batch, forward and backward, then the parameter store's update.
// In an elastic job the store says, step by step, whether this worker
// computes the step and which examples are its own: a worker taken in later
// starts at the step it joins, and one scaled away leaves after its last.
// Prints a progress line every progressIntervalMs and keeps the worker's
// Prometheus metrics, from the same counters, so the two always agree; the
// operator reads the job's progress from them (api/training_progress.h).
//
// Runs on the calling thread; nothing in it is shared.
#ifndef KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_
#define KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_

#include <optional>

#include "api/training_job.h"
#include "common/metrics.h"
#include "common/status.h"
#include "worker-agent/parameter_store.h"
#include "worker-agent/trainer/fashion_mnist.h"
#include "worker-agent/trainer/model.h"

namespace kubeps {

struct LoopConfig {
  int rank = 0;
  int num_workers = 1;
  int local_batch = 64;  // this worker's share of the global batch
  int epochs = 1;
  uint64_t seed = 1;
  int progress_interval_ms = 2000;
  uint64_t max_steps = 0;  // stop early after this many steps (0 = all epochs)
  // spec.nonFinite is Fail: a NaN or Inf loss ends training (the gradient
  // pushed with it would be refused anyway); under SkipStep it is pushed and
  // the shards skip that step.
  bool fail_on_non_finite_loss = true;
  // KUBEPS_TRACE_STEP: print the timeline of this step (common/step_trace.h).
  std::optional<uint64_t> trace_step;
};

struct LoopResult {
  uint64_t steps = 0;           // the global step training ended at
  uint64_t total_steps = 0;     // epochs x steps per epoch, or max_steps
  double seconds = 0;           // training time, evaluation excluded
  double steps_per_second = 0;  // of the steps this process trained (a resumed job's are fewer)
  double waited_seconds = 0;    // of `seconds`, blocked on the exchange (TakeWaitedSeconds)
  double final_loss = 0;        // mean loss over the last progress interval
  bool left = false;            // scaled away: the job goes on without this worker
  // When training failed for a reason a restart cannot cure (a diverged
  // model): NonFiniteLoss or NonFiniteGradient; "" otherwise.
  std::string failure_reason;
};

Status RunTrainingLoop(const LoopConfig& config, const trainer::Dataset& train,
                       trainer::Model& model, ParameterStore& store, MetricsServer& metrics,
                       LoopResult* result);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_
