#include "operator/kube/job_progress.h"

#include <cmath>
#include <cstdlib>

#include "operator/kube/kube_cluster.h"

namespace kubeps::kube {

using nlohmann::json;

std::optional<api::TrainingSummary> FinishedWorkerSummary(const JobIdentity& job,
                                                          const std::vector<json>& pods) {
  std::optional<api::TrainingSummary> newest;
  int newest_restarts = -1;
  for (const json& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kScheduler, 0};
    if (!KubeCluster::ReplicaOf(pod, &name) || name.role != controller::ReplicaRole::kWorker ||
        name.index != 0 || !OwnedBy(pod, job)) {
      continue;
    }
    const controller::ReplicaStatus replica = KubeCluster::StatusOf(pod);
    if (replica.phase != controller::ReplicaPhase::kSucceeded ||
        replica.reason != api::kReasonTrainingFinished || replica.restarts <= newest_restarts) {
      continue;
    }
    if (auto summary = api::ParseTrainingSummary(replica.message)) {
      newest = summary;
      newest_restarts = replica.restarts;
    }
  }
  return newest;
}

void ApplyProbe(const WorkerProgress& probe, double steps_per_second,
                api::TrainingJobStatus* status) {
  status->step = static_cast<int64_t>(probe.step);
  if (probe.total_steps && *probe.total_steps > 0)
    status->total_steps = static_cast<int64_t>(*probe.total_steps);
  if (steps_per_second > 0) status->steps_per_second = api::FormatFixed(steps_per_second, 1);
  if (probe.loss && std::isfinite(*probe.loss)) status->loss = api::FormatFixed(*probe.loss, 4);
}

void ApplySummary(const api::TrainingSummary& summary, api::TrainingJobStatus* status) {
  status->step = summary.step;
  if (summary.total_steps > 0) status->total_steps = summary.total_steps;
  if (summary.steps_per_second)
    status->steps_per_second = api::FormatFixed(*summary.steps_per_second, 1);
  if (summary.loss) status->loss = api::FormatFixed(*summary.loss, 4);
  if (summary.test_accuracy) status->test_accuracy = api::FormatFixed(*summary.test_accuracy, 4);
}

void SetProgressAndEta(bool finished, api::TrainingJobStatus* status) {
  if (!status->step || !status->total_steps) return;
  status->progress = api::ProgressPercent(*status->step, *status->total_steps);
  const double rate = std::strtod(status->steps_per_second.c_str(), nullptr);
  status->eta = api::EstimatedTimeLeft(*status->step, *status->total_steps, rate);
  if (finished && status->eta != "0s") status->eta.clear();
}

}  // namespace kubeps::kube
