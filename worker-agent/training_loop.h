// The built-in trainer's loop: for every step, this worker's slice of the
// global batch, forward and backward, then the parameter store's update.
// Prints a progress line every progressIntervalMs and keeps the worker's
// Prometheus metrics, from the same counters, so the two always agree.
//
// Runs on the calling thread; nothing in it is shared.
#ifndef KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_
#define KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_

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
};

struct LoopResult {
  uint64_t steps = 0;
  double seconds = 0;     // training time, evaluation excluded
  double final_loss = 0;  // mean loss over the last progress interval
  // When training failed for a reason a restart cannot cure (a diverged
  // model): NonFiniteLoss or NonFiniteGradient; "" otherwise.
  std::string failure_reason;
};

Status RunTrainingLoop(const LoopConfig& config, const trainer::Dataset& train,
                       trainer::Model& model, ParameterStore& store, MetricsServer& metrics,
                       LoopResult* result);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_TRAINING_LOOP_H_
