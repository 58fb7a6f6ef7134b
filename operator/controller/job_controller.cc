#include "operator/controller/job_controller.h"

#include "common/logging.h"
#include "common/termination_message.h"

#include <map>

#include "operator/controller/restart_policy.h"

namespace kubeps::controller {

const char* ToString(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kScheduler:
      return "scheduler";
    case ReplicaRole::kServer:
      return "server";
    case ReplicaRole::kWorker:
      return "worker";
  }
  return "?";
}

std::string ReplicaName::ToString() const {
  return std::string(controller::ToString(role)) + "-" + std::to_string(index);
}

const char* ToString(ReplicaPhase phase) {
  switch (phase) {
    case ReplicaPhase::kPending:
      return "Pending";
    case ReplicaPhase::kRunning:
      return "Running";
    case ReplicaPhase::kSucceeded:
      return "Succeeded";
    case ReplicaPhase::kFailed:
      return "Failed";
  }
  return "?";
}

JobController::JobController(api::TrainingJob job, Cluster* cluster, LaunchBuilder build_launch)
    : job_(std::move(job)), cluster_(cluster), build_launch_(std::move(build_launch)) {}

std::vector<ReplicaName> JobController::DesiredReplicas() const {
  std::vector<ReplicaName> names{{ReplicaRole::kScheduler, 0}};
  for (int i = 0; i < job_.spec.ps.replicas; ++i) names.push_back({ReplicaRole::kServer, i});
  for (int i = 0; i < job_.spec.worker.replicas; ++i) names.push_back({ReplicaRole::kWorker, i});
  return names;
}

JobStatus JobController::Observe(const std::vector<ReplicaStatus>& replicas) const {
  JobStatus status;
  for (const auto& r : replicas) {
    RoleCounts& counts = r.name.role == ReplicaRole::kWorker   ? status.workers
                         : r.name.role == ReplicaRole::kServer ? status.servers
                                                               : status.scheduler;
    if (r.phase == ReplicaPhase::kSucceeded)
      ++counts.succeeded;
    else if (r.phase == ReplicaPhase::kFailed)
      ++counts.failed;
    else
      ++counts.active;
    if (r.phase == ReplicaPhase::kRunning) ++counts.running;
    status.restarts += r.restarts;
  }
  return status;
}

JobStatus JobController::Reconcile(int64_t now_ms) {
  std::map<ReplicaName, ReplicaStatus> observed;
  for (auto& r : cluster_->List()) observed[r.name] = r;
  std::vector<ReplicaStatus> all;
  for (auto& [name, r] : observed) all.push_back(r);
  JobStatus status = final_counts_ ? *final_counts_ : Observe(all);

  if (succeeded_) {
    status.phase = JobPhase::kSucceeded;
    status.reason = "JobSucceeded";
    status.message = "TrainingJob " + job_.name + " completed successfully";
    return status;
  }
  if (start_ms_ < 0) start_ms_ = now_ms;
  const int64_t deadline_s = job_.spec.run_policy.active_deadline_seconds;
  if (failure_.empty() && deadline_s > 0 && now_ms - start_ms_ > deadline_s * 1000) {
    return Fail(
        "DeadlineExceeded",
        "the job ran longer than activeDeadlineSeconds (" + std::to_string(deadline_s) + " s)",
        now_ms);
  }
  if (!failure_.empty()) {
    status.phase = JobPhase::kFailed;
    status.reason = failure_code_;
    status.message = failure_;
    return status;
  }

  // Done: every worker exited 0. Servers and the scheduler exit on their
  // own when the scheduler tells them; after kLingerMs they are deleted.
  if (status.workers.succeeded == job_.spec.worker.replicas) {
    if (workers_done_at_ms_ < 0) workers_done_at_ms_ = now_ms;
    if (status.scheduler.active + status.servers.active > 0 &&
        now_ms - workers_done_at_ms_ < kLingerMs) {
      status.phase = JobPhase::kRunning;
      status.reason = "WorkersSucceeded";
      status.message = "every worker finished; waiting for servers to exit";
      return status;
    }
    final_counts_ = status;
    Cleanup();
    succeeded_ = true;
    return Reconcile(now_ms);
  }

  // Create what is missing; decide about what failed.
  const std::string scheduler_address = cluster_->SchedulerAddress();
  bool restarting = false;
  for (const ReplicaName& name : DesiredReplicas()) {
    auto it = observed.find(name);
    if (it == observed.end()) {
      // Everything but the scheduler needs its address; wait for it.
      if (name.role != ReplicaRole::kScheduler && scheduler_address.empty()) continue;
      Status s = cluster_->Create(build_launch_(name, scheduler_address));
      if (s.code() == Status::Code::kUnavailable) {
        KLOG_INFO << "starting " << name.ToString() << ": " << s.message() << "; trying again";
        continue;
      }
      if (!s.ok())
        return Fail("CreateFailed", "cannot start " + name.ToString() + ": " + s.message(), now_ms);
      continue;
    }
    const ReplicaStatus& r = it->second;
    if (r.phase != ReplicaPhase::kFailed && !EndedBeforeTheWorkers(r)) continue;
    if (IsPermanentReason(r.reason)) {
      return Fail(
          r.reason,
          name.ToString() +
              " failed and is not restarted (a rerun would fail the same way): " + r.message,
          now_ms);
    }
    RestartDecision decision =
        DecideRestart(job_.spec.run_policy, name.ToString(), r.exit_code, status.restarts);
    if (!decision.restart) return Fail(decision.code, decision.reason, now_ms);
    Status s = cluster_->Create(build_launch_(name, scheduler_address));
    if (s.code() == Status::Code::kUnavailable) {
      KLOG_INFO << "restarting " << name.ToString() << ": " << s.message() << "; trying again";
      continue;
    }
    if (!s.ok())
      return Fail("CreateFailed", "cannot restart " + name.ToString() + ": " + s.message(), now_ms);
    ++status.restarts;
    status.message = decision.reason;
    restarting = true;
  }
  if (restarting) {
    status.phase = JobPhase::kRestarting;
    status.reason = "ReplicaRestarted";
  } else if (status.workers.running + status.workers.succeeded == job_.spec.worker.replicas) {
    // Running, not merely created: a pending pod may wait long for a node.
    status.phase = JobPhase::kRunning;
    status.reason = "JobRunning";
    status.message = "every replica is running";
  } else {
    status.phase = JobPhase::kCreated;
    status.reason = "JobCreated";
    status.message = "starting replicas";
  }
  return status;
}

// Servers and the scheduler end, with exit 0 and the reason JobOver, when
// the scheduler has seen every worker finish, which can be observed here a
// moment before the workers' own exits: not a failure. Any other end of
// theirs while workers still need them is one, whatever the exit code.
bool JobController::EndedBeforeTheWorkers(const ReplicaStatus& replica) {
  return replica.name.role != ReplicaRole::kWorker && replica.phase == ReplicaPhase::kSucceeded &&
         replica.reason != kReasonJobOver;
}

JobStatus JobController::Fail(const std::string& code, const std::string& message, int64_t now_ms) {
  failure_code_ = code;
  failure_ = message;
  JobStatus counts = Observe(cluster_->List());
  // The restart that was just refused is not counted; the failed one is.
  final_counts_ = counts;
  Cleanup();
  return Reconcile(now_ms);
}

void JobController::Cleanup() {
  switch (job_.spec.run_policy.clean_pod_policy) {
    case api::CleanPodPolicy::kNone:
      return;
    case api::CleanPodPolicy::kAll:
      DeleteAll();
      return;
    case api::CleanPodPolicy::kRunning:
      for (auto& r : cluster_->List()) {
        if (r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning)
          DeleteOrLog(r.name);
      }
      return;
  }
}

void JobController::DeleteAll() {
  for (auto& r : cluster_->List()) DeleteOrLog(r.name);
}

// Deleting is best effort: a replica that stays is deleted again by the
// next pass (and, on Kubernetes, collected with its job).
void JobController::DeleteOrLog(const ReplicaName& name) {
  if (Status s = cluster_->Delete(name); !s.ok())
    KLOG_ERROR << "deleting " << name.ToString() << ": " << s.message();
}

}  // namespace kubeps::controller
