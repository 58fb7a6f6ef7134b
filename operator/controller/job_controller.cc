#include "operator/controller/job_controller.h"

#include <algorithm>
#include <map>

#include "common/logging.h"
#include "common/termination_message.h"
#include "operator/controller/restart_policy.h"

namespace kubeps::controller {
namespace {

// Whether a replica whose pod its node refused is still in the back-off
// before its next pod: 10 s after the refused pod was made, doubled for
// each of `earlier_tries`, at most 6 minutes, as the Job controller's.
bool InRejectionBackoff(const ReplicaStatus& replica, int earlier_tries, int64_t now_ms) {
  if (replica.created_ms < 0) return false;
  const int64_t wait =
      std::min<int64_t>(JobController::kRejectionBackoffMs << std::clamp(earlier_tries, 0, 6),
                        JobController::kMaxRejectionBackoffMs);
  return now_ms - replica.created_ms < wait;
}

bool IsActive(const ReplicaStatus& r) {
  return r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning;
}

// "server-0, server-1"
std::string JoinNames(const std::vector<ReplicaName>& names) {
  std::string joined;
  for (const ReplicaName& name : names) joined += (joined.empty() ? "" : ", ") + name.ToString();
  return joined;
}

// "worker-0 (pod mnist-worker-0)": the replica, and its instance where the
// backend names one, so that a user knows what to `kubectl describe`.
std::string Named(const ReplicaStatus& replica) {
  const std::string name = replica.name.ToString();
  return replica.instance.empty() ? name : name + " (pod " + replica.instance + ")";
}

// "ImagePullBackOff: Back-off pulling image ..."
std::string StartProblem(const ReplicaStatus& replica) {
  return replica.start_problem +
         (replica.start_problem_message.empty() ? "" : ": " + replica.start_problem_message);
}

// What a failed replica said of its failure, to add to the job's message:
// " (DatasetNotFound: ...)", or "" when it said nothing.
std::string LastWords(const ReplicaStatus& replica) {
  if (replica.message.empty()) return "";
  return " (" + (replica.reason.empty() ? "" : replica.reason + ": ") + replica.message + ")";
}

// The job's reason when a replica never started within
// podStartTimeoutSeconds, by what kept it from starting.
std::string StartFailureReason(const std::string& problem) {
  if (problem == "ErrImagePull" || problem == "ImagePullBackOff" || problem == "InvalidImageName" ||
      problem == "ErrImageNeverPull") {
    return "ImagePullFailed";
  }
  if (problem == "Unschedulable") return "Unschedulable";
  if (problem == "CreateContainerConfigError" || problem == "CreateContainerError")
    return "ContainerConfigInvalid";
  if (problem == "FailedMount") return "VolumeMountFailed";
  return "PodStartFailed";
}

// What the replica is doing, for messages: "exited with code 0";
// `if_missing` when the cluster runs none of that name.
std::string Describe(const std::map<ReplicaName, ReplicaStatus>& observed, const ReplicaName& name,
                     const char* if_missing) {
  auto it = observed.find(name);
  if (it == observed.end()) return if_missing;
  switch (it->second.phase) {
    case ReplicaPhase::kPending:
      if (!it->second.start_problem.empty())
        return "cannot start (" + StartProblem(it->second) + ")";
      return "is pending";
    case ReplicaPhase::kRunning:
      return "is running";
    case ReplicaPhase::kSucceeded:
    case ReplicaPhase::kFailed:
      return "exited with code " + std::to_string(it->second.exit_code);
  }
  return "?";
}

}  // namespace

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
    : job_(std::move(job)),
      cluster_(cluster),
      build_launch_(std::move(build_launch)),
      desired_workers_(job_.spec.worker.replicas) {}

void JobController::SortForStopping(std::vector<ReplicaName>* names) {
  std::sort(names->begin(), names->end(), [](const ReplicaName& a, const ReplicaName& b) {
    return a.role != b.role ? a.role > b.role : a.index < b.index;
  });
}

std::vector<ReplicaName> JobController::DesiredReplicas() const {
  std::vector<ReplicaName> names{{ReplicaRole::kScheduler, 0}};
  for (int i = 0; i < job_.spec.ps.replicas; ++i) names.push_back({ReplicaRole::kServer, i});
  for (int i = 0; i < desired_workers_; ++i) names.push_back({ReplicaRole::kWorker, i});
  return names;
}

void JobController::StopSurplusWorkers(const std::map<ReplicaName, ReplicaStatus>& observed,
                                       int64_t now_ms) {
  std::vector<ReplicaName> ended, overdue;
  for (const auto& [name, r] : observed) {
    const bool computes = computing_workers_ && computing_workers_->count(name.index) > 0;
    if (name.role != ReplicaRole::kWorker || name.index < desired_workers_ || computes) {
      timers_.surplus_since_ms.erase(name);
      continue;
    }
    if (!IsActive(r)) {
      ended.push_back(name);  // it left: its pod goes
      timers_.surplus_since_ms.erase(name);
      continue;
    }
    const int64_t since = timers_.surplus_since_ms.emplace(name, now_ms).first->second;
    if (now_ms - since >= kSurplusGraceMs) overdue.push_back(name);
  }
  DeleteOrLog(ended, Cluster::kBackendGrace);
  if (overdue.empty()) return;
  KLOG_INFO << JoinNames(overdue) << " did not leave within " << kSurplusGraceMs / 1000
            << " s of the job being scaled to " << desired_workers_ << " workers"
            << (computing_workers_ ? " and of its last step" : "") << ": stopping it";
  DeleteOrLog(overdue, Cluster::kBackendGrace);
}

JobStatus JobController::Observe(const std::vector<ReplicaStatus>& replicas) const {
  JobStatus status;
  // Recorded restarts count even for a replica whose pod was deleted from
  // outside and is not there right now.
  for (const auto& [name, restarts] : known_restarts_) {
    if (restarts > 0) status.replica_restarts[name] = restarts;
  }
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
    if (r.restarts > 0) {
      int& restarts = status.replica_restarts[r.name.ToString()];
      restarts = std::max(restarts, r.restarts);
    }
  }
  for (const auto& [name, restarts] : status.replica_restarts) status.restarts += restarts;
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

  const bool job_over = SchedulerSawTheJobOver(observed);
  // An elastic job's workers may have left (exit 0) while it goes on: only
  // the scheduler knows when it is over.
  const bool elastic = job_.spec.elastic.enabled();
  if ((!elastic && status.workers.succeeded == job_.spec.worker.replicas) ||
      (job_over && status.workers.active == 0))
    return FinishJob(std::move(status), observed, now_ms);
  if (job_over) return WaitForWorkersAfterJobOver(std::move(status), observed, now_ms);

  if (elastic) StopSurplusWorkers(observed, now_ms);
  // Create what is missing; decide about what failed.
  const std::string scheduler_address = cluster_->SchedulerAddress();
  std::vector<std::string> restarts;            // what each restart of this pass says
  const ReplicaStatus* cannot_start = nullptr;  // the first replica stuck before starting
  int trained_on_without = 0;                   // stuck workers an elastic job does without
  const bool has_run = has_run_;
  for (const ReplicaName& name : DesiredReplicas()) {
    auto it = observed.find(name);
    if (it != observed.end() && it->second.phase == ReplicaPhase::kPending &&
        !it->second.start_problem.empty()) {
      const ReplicaStatus& stuck = it->second;
      // Its scheduler takes a worker in whenever it comes (a node freed, the
      // cluster autoscaled), and trains on meanwhile with its minReplicas.
      // Only room comes by itself: an image that cannot be pulled, a bad
      // configuration or a volume that cannot be mounted stays so, and is
      // said by the timeout.
      const bool waits_for_room = elastic && has_run && name.role == ReplicaRole::kWorker &&
                                  stuck.start_problem == "Unschedulable";
      if (waits_for_room && status.workers.running >= job_.spec.elastic.min_replicas) {
        timers_.needed_since_ms[name] = now_ms;  // not needed yet
        ++trained_on_without;
        continue;
      }
      if (waits_for_room) timers_.needed_since_ms.emplace(name, now_ms);
      if (!cannot_start) cannot_start = &stuck;
      const int64_t timeout_s = job_.spec.run_policy.pod_start_timeout_seconds;
      const int64_t since = timers_.StartClock(name, stuck.created_ms);
      if (timeout_s > 0 && since >= 0 && now_ms - since >= timeout_s * 1000) {
        return Fail(StartFailureReason(stuck.start_problem),
                    Named(stuck) + " could not start within podStartTimeoutSeconds (" +
                        std::to_string(timeout_s) + " s): " + StartProblem(stuck),
                    now_ms);
      }
      continue;
    }
    // Running, or made anew: its clock starts again. (One being made,
    // ContainerCreating, keeps it: it may yet fail to pull its image.)
    if (it == observed.end() || it->second.phase != ReplicaPhase::kPending)
      timers_.needed_since_ms.erase(name);
    // Not there (new, or deleted from outside: a drain's eviction), or
    // ended by its node: made (again) without counting as a restart.
    if (it == observed.end() || it->second.disrupted) {
      // Everything but the scheduler needs its address; wait for it.
      if (name.role != ReplicaRole::kScheduler && scheduler_address.empty()) continue;
      // Refused by a node shutting down: one its template binds to that
      // node (nodeName) would be refused again at once until it is back, so
      // each refusal in a row doubles the wait.
      if (it != observed.end() && it->second.rejected &&
          InRejectionBackoff(it->second, it->second.node_refusals - 1, now_ms)) {
        continue;
      }
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
    if (r.phase == ReplicaPhase::kSucceeded && r.reason == kReasonScaledAway) {
      // Scaled away earlier, wanted again: a new pod joins the job.
      if (Status s = cluster_->Create(build_launch_(name, scheduler_address)); !s.ok())
        KLOG_INFO << "starting " << name.ToString() << " again: " << s.message();
      continue;
    }
    if (r.phase != ReplicaPhase::kFailed && !EndedBeforeTheWorkers(r)) continue;
    if (IsPermanentReason(r.reason)) {
      return Fail(
          r.reason,
          name.ToString() +
              " failed and is not restarted (a rerun would fail the same way): " + r.message,
          now_ms);
    }
    RestartDecision decision =
        r.rejected
            ? DecideRestartAfterRejection(job_.spec.run_policy, name.ToString(), status.restarts)
            : DecideRestart(job_.spec.run_policy, name.ToString(), r.exit_code, status.restarts);
    // "exited with code 1" says little: the replica's own words say why.
    decision.reason += LastWords(r);
    if (!decision.restart) return Fail(decision.code, decision.reason, now_ms);
    // A node that refused a pod often refuses the next at once too (a GPU
    // device plugin not registered yet after a restart): made again after
    // a back-off, as the Job controller's (10 s, doubling, at most 6 min).
    if (r.rejected && InRejectionBackoff(r, r.restarts, now_ms)) continue;
    Status s = cluster_->Create(build_launch_(name, scheduler_address));
    if (s.code() == Status::Code::kUnavailable) {
      KLOG_INFO << "restarting " << name.ToString() << ": " << s.message() << "; trying again";
      continue;
    }
    if (!s.ok())
      return Fail("CreateFailed", "cannot restart " + name.ToString() + ": " + s.message(), now_ms);
    ++status.restarts;
    ++status.replica_restarts[name.ToString()];
    restarts.push_back(decision.reason);
  }
  if (!restarts.empty()) {
    status.phase = JobPhase::kRestarting;
    status.reason = "ReplicaRestarted";
    status.message.clear();
    for (const std::string& restart : restarts)
      status.message += (status.message.empty() ? "" : "; ") + restart;
  } else if (status.workers.running + status.workers.succeeded >= desired_workers_ || has_run) {
    // Running, not merely created: a pending pod may wait long for a node.
    // A job that has run trains on while a worker's pod is made (scaled up,
    // deleted by a drain): it is not new again.
    has_run_ = true;
    status.phase = JobPhase::kRunning;
    status.reason = "JobRunning";
    status.message = RunningMessage(observed);
    if (cannot_start) status.message += StartTimeoutNote();
    if (trained_on_without > 0) {
      status.message += std::string("; the job trains on without ") +
                        (trained_on_without == 1 ? "it" : "them") +
                        " while it has elasticPolicy.minReplicas (" +
                        std::to_string(job_.spec.elastic.min_replicas) + ") workers";
    }
  } else if (cannot_start) {
    // Still Created, but not merely starting: say what keeps it, as the
    // pod's own status would, instead of leaving the user to find the pod.
    status.phase = JobPhase::kCreated;
    status.reason = cannot_start->start_problem;
    status.message =
        Named(*cannot_start) + " cannot start: " + StartProblem(*cannot_start) + StartTimeoutNote();
  } else {
    status.phase = JobPhase::kCreated;
    status.reason = "JobCreated";
    status.message = "starting replicas";
  }
  return status;
}

std::string JobController::StartTimeoutNote() const {
  const int64_t timeout_s = job_.spec.run_policy.pod_start_timeout_seconds;
  if (timeout_s <= 0) return "; the job waits for it (runPolicy.podStartTimeoutSeconds is unset)";
  return "; the job fails if it cannot start within runPolicy.podStartTimeoutSeconds (" +
         std::to_string(timeout_s) + " s)";
}

// Servers and the scheduler end, with exit 0 and the reason JobOver, when
// the scheduler has seen every worker finish, which can be observed here a
// moment before the workers' own exits: not a failure. Any other end of
// theirs while workers still need them is one, whatever the exit code.
bool JobController::EndedBeforeTheWorkers(const ReplicaStatus& replica) {
  return replica.name.role != ReplicaRole::kWorker && replica.phase == ReplicaPhase::kSucceeded &&
         !IsJobOverReason(replica.reason);
}

// The scheduler says JobOver only once every worker has told it that it
// finished: a worker that fails after that (killed on its way out) lost
// nothing, and restarting it would leave it waiting for a scheduler that is
// gone.
bool JobController::SchedulerSawTheJobOver(const std::map<ReplicaName, ReplicaStatus>& observed) {
  auto it = observed.find(ReplicaName{ReplicaRole::kScheduler, 0});
  return it != observed.end() && it->second.phase == ReplicaPhase::kSucceeded &&
         IsJobOverReason(it->second.reason);
}

// Workers still there after the scheduler saw every one finish are on their
// way out (a last evaluation, their final words): waited for as long as
// servers are, then stopped. None is started again.
JobStatus JobController::WaitForWorkersAfterJobOver(
    JobStatus status, const std::map<ReplicaName, ReplicaStatus>& observed, int64_t now_ms) {
  if (timers_.workers_done_ms < 0) timers_.workers_done_ms = now_ms;
  if (now_ms - timers_.workers_done_ms >= kLingerMs)
    return FinishJob(std::move(status), observed, now_ms);
  std::vector<ReplicaName> left;
  for (const auto& [name, r] : observed) {
    if (name.role == ReplicaRole::kWorker && IsActive(r)) left.push_back(name);
  }
  status.phase = JobPhase::kRunning;
  status.reason = "WorkersSucceeded";
  status.message =
      "the scheduler saw every worker finish; waiting for " + JoinNames(left) + " to exit";
  return status;
}

std::string JobController::RunningMessage(
    const std::map<ReplicaName, ReplicaStatus>& observed) const {
  std::string others;
  for (const ReplicaName& name : DesiredReplicas()) {
    auto it = observed.find(name);
    if (it != observed.end() && it->second.phase == ReplicaPhase::kRunning) continue;
    // A worker that is done is part of a running job.
    if (name.role == ReplicaRole::kWorker && it != observed.end() &&
        it->second.phase == ReplicaPhase::kSucceeded)
      continue;
    others += (others.empty() ? "" : ", ") + name.ToString() + " " +
              Describe(observed, name, "is starting");
  }
  if (others.empty()) return "every replica is running";
  return "the job is running, but " + others;
}

JobStatus JobController::FinishJob(JobStatus status,
                                   const std::map<ReplicaName, ReplicaStatus>& observed,
                                   int64_t now_ms) {
  if (timers_.workers_done_ms < 0) timers_.workers_done_ms = now_ms;
  std::vector<ReplicaName> left;  // the scheduler and servers still there
  for (const auto& [name, r] : observed) {
    if (name.role != ReplicaRole::kWorker && IsActive(r)) left.push_back(name);
  }
  const ReplicaName scheduler{ReplicaRole::kScheduler, 0};
  // A scheduler that ended with JobOver told every server first (it waits
  // for them to hear it): they are on their way out, worth waiting for.
  // One that gave up waiting (JobOverUnheard) left some that never will.
  auto scheduler_it = observed.find(scheduler);
  const bool scheduler_told_them =
      scheduler_it != observed.end() && scheduler_it->second.reason == kReasonJobOver;
  const bool scheduler_left = status.scheduler.active > 0 || scheduler_told_them;
  const bool servers_left = status.servers.active > 0;
  // Servers exit when the scheduler tells them the job is over, and the
  // scheduler once they have heard it: worth waiting for only while both
  // are there. A server whose scheduler is gone would wait for it in vain.
  const int64_t linger = servers_left ? kLingerMs : kSchedulerLingerMs;
  const int64_t waited = now_ms - timers_.workers_done_ms;
  if (!left.empty() && scheduler_left && waited < linger) {
    status.phase = JobPhase::kRunning;
    status.reason = "WorkersSucceeded";
    status.message = "every worker finished; waiting for " + JoinNames(left) + " to exit";
    return status;
  }
  if (!left.empty()) {
    if (!scheduler_left) {
      KLOG_INFO << "every worker finished and scheduler-0 "
                << Describe(observed, scheduler, "is gone") << ": stopping " << JoinNames(left)
                << ", which no scheduler will tell that the job is over";
    } else {
      KLOG_INFO << "every worker finished " << waited << " ms ago: stopping " << JoinNames(left)
                << ", still running";
    }
  }
  final_counts_ = status;
  Cleanup();
  succeeded_ = true;
  return Reconcile(now_ms);
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
    case api::CleanPodPolicy::kRunning: {
      std::vector<ReplicaName> running;
      for (auto& r : cluster_->List()) {
        if (IsActive(r)) running.push_back(r.name);
      }
      DeleteOrLog(std::move(running), Cluster::kBackendGrace);
      return;
    }
  }
}

void JobController::DeleteAll(int grace_ms) {
  std::vector<ReplicaName> names;
  for (auto& r : cluster_->List()) names.push_back(r.name);
  DeleteOrLog(std::move(names), grace_ms);
}

// Deleting is best effort: a replica that stays is deleted again by the
// next pass (and, on Kubernetes, collected with its job).
void JobController::DeleteOrLog(std::vector<ReplicaName> names, int grace_ms) {
  if (names.empty()) return;
  SortForStopping(&names);
  if (Status s = cluster_->DeleteAll(names, grace_ms); !s.ok())
    KLOG_ERROR << "deleting " << JoinNames(names) << ": " << s.message();
}

}  // namespace kubeps::controller
