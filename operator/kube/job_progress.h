// A TrainingJob's training progress in its status (step, total steps,
// steps/sec, progress, ETA, loss, test accuracy): from worker 0's metrics
// while it trains (progress_probe.h), and from its pod's termination message
// once it has finished (api/training_progress.h), which wins: it holds the
// step training really ended at and the test accuracy, which no probe of a
// process that has exited can read.
//
// Pure functions over the status and the pods as read: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBE_JOB_PROGRESS_H_
#define KUBEPS_OPERATOR_KUBE_JOB_PROGRESS_H_

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/training_job_status.h"
#include "api/training_progress.h"
#include "operator/kube/pod_builder.h"
#include "operator/kube/progress_probe.h"

namespace kubeps::kube {

// What worker 0 of `job` said as it finished training, if a pod of it has
// succeeded saying so (the newest such pod, should it have restarted).
std::optional<api::TrainingSummary> FinishedWorkerSummary(const JobIdentity& job,
                                                          const std::vector<nlohmann::json>& pods);

// Step, total steps, loss and, given `steps_per_second` (> 0: measured
// between this probe and the last one), the rate, from a probe.
void ApplyProbe(const WorkerProgress& probe, double steps_per_second,
                api::TrainingJobStatus* status);

// Everything a finished worker's summary says.
void ApplySummary(const api::TrainingSummary& summary, api::TrainingJobStatus* status);

// Progress and ETA from the step, total and rate in `status`. A finished
// job that did not train to its end (it failed) has no ETA.
void SetProgressAndEta(bool finished, api::TrainingJobStatus* status);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_JOB_PROGRESS_H_
