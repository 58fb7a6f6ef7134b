#include "operator/kube/job_reconciler.h"

#include <algorithm>
#include <random>

#include "common/logging.h"
#include "common/time_format.h"
#include "operator/controller/replica_env.h"
#include "operator/controller/replica_tls.h"
#include "operator/kube/job_progress.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using controller::JobPhase;
using nlohmann::json;
using Clock = std::chrono::system_clock;

namespace {

JobIdentity IdentityOf(const json& job) {
  const json& meta = job["metadata"];
  return {meta.value("name", ""), meta.value("namespace", "default"), meta.value("uid", "")};
}

std::string JobPath(const JobIdentity& id, const std::string& subresource = "") {
  return ObjectPath(kTrainingJobs, id.namespace_, id.name, subresource);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

int64_t ToMs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string RandomToken() {
  std::random_device device;
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", device() & 0xff);
  return hex;
}

}  // namespace

JobReconciler::JobReconciler(KubeClient* client, JobObjectOptions options, MetricsServer* metrics)
    : client_(client), options_(std::move(options)), metrics_(metrics) {}

void JobReconciler::Forget(const std::string& uid) {
  jobs_.erase(uid);
  finished_.erase(uid);
  workloads_finished_.erase(uid);
}

Status JobReconciler::Reconcile(const json& job, const std::vector<json>& pods,
                                ReconcileResult* result) {
  const JobIdentity id = IdentityOf(job);
  const api::TrainingJobStatus status = api::StatusFromJson(job.value("status", json::object()));
  // Every path of a queued job reads or writes its Workload in the version
  // Kueue serves.
  if (!QueueName(job).empty()) kueue_api_.EnsureDiscovered();

  // A finished job only waits for its TTL (and, queued, gives Kueue its
  // quota back first).
  if (status.finished()) {
    if (!QueueName(job).empty()) FinishWorkload(id, status);
    const int64_t ttl =
        job["spec"].value("runPolicy", json::object()).value("ttlSecondsAfterFinished", -1);
    if (ttl >= 0) {
      auto expires = ParseTime(status.completion_time) + std::chrono::seconds(ttl);
      if (Clock::now() >= expires) {
        // This job only: the name may be another's by now (deleted and
        // applied again while the cache held this one).
        Response deleted;
        if (Status s = client_->DeleteWithOptions(JobPath(id), DeleteOnlyUid(id.uid), &deleted);
            !s.ok())
          return s;
        if (!deleted.ok() && deleted.code != 404 && deleted.code != 409) {
          return Status::Error("deleting " + id.name +
                               " after ttlSecondsAfterFinished: " + deleted.Describe());
        }
        KLOG_INFO << "deleted " << id.namespace_ << "/" << id.name
                  << ": ttlSecondsAfterFinished passed";
        return Status::Ok();
      }
      result->requeue_after =
          std::chrono::duration_cast<std::chrono::milliseconds>(expires - Clock::now());
    }
    return Status::Ok();
  }

  if (finished_.count(id.uid) != 0) {
    KLOG_INFO << "reconcile " << id.namespace_ << "/" << id.name
              << ": this operator finished it; waiting for the cache to show it";
    return Status::Ok();
  }

  JobState& state = jobs_[id.uid];
  const auto now = std::chrono::steady_clock::now();
  const std::vector<json> known_pods = state.created_pods.Apply(pods, now);
  json checked = job;
  const ScaleRefusal refusal =
      SettleScaledWorkers(status, StartedWorkers(known_pods, id), &checked);
  api::ParseResult parsed = api::ParseTrainingJob(checked.dump());
  if (!parsed.ok()) return FailJob(job, "InvalidSpec", parsed.ErrorReport(id.name), result);
  api::TrainingJob spec = *parsed.job;
  spec.name = id.name;
  spec.namespace_ = id.namespace_;
  spec.uid = id.uid;
  if (state.terminal) return Write(job, *state.terminal, result);
  if (refusal.message != state.scale_reported) {
    if (!refusal.reason.empty()) RecordEvent(job, "Warning", refusal.reason, refusal.message);
    state.scale_reported = refusal.message;
  }
  if (Status s = ResolveTls(id, &spec, &state); !s.ok()) return s;
  auto launch = [&spec](const controller::ReplicaName& name, const std::string& scheduler) {
    return controller::ReplicaLaunch{name, controller::ReplicaBinary(name),
                                     controller::ReplicaArgs(spec, name),
                                     controller::ReplicaEnv(spec, name, scheduler), std::nullopt};
  };
  const std::string queue = QueueName(job);
  KueueGate kueue;
  if (!queue.empty() && !spec.spec.run_policy.suspend) {
    if (Status s = GateOnKueue(job, id, queue, &spec, &state, &kueue); !s.ok()) return s;
    if (!kueue.workload.is_null() && kueue.remake_because.empty())
      ReportPodsReady(id, kueue.admitted, known_pods, spec, &kueue.workload);
  }
  // Checked as Kueue's integrations check it, when the job starts: a running
  // job's pods made again keep their template's values.
  if (kueue.admitted && !kueue.conflict.empty() && known_pods.empty())
    return FailJob(job, "FailedToStart", kueue.conflict, result);
  if (kueue.partial_admission != state.partial_admission_reported) {
    if (!kueue.partial_admission.empty())
      RecordEvent(job, "Normal", "PartiallyAdmitted", kueue.partial_admission);
    state.partial_admission_reported = kueue.partial_admission;
  }
  KubeCluster cluster(client_, id, spec, options_.images, known_pods, status.replica_restarts);
  cluster.set_mount_failures(state.mount_failures.Refresh(client_, pods, Clock::now()));
  // Before a hold too: a held job waits for its pods to be gone (a queued
  // one to give its quota back), and one on a lost node never goes alone.
  for (const auto& action : state.stranded_pods.Release(client_, id, pods, Clock::now())) {
    KLOG_INFO << id.namespace_ << "/" << id.name << ": " << action.message;
    RecordEvent(job, "Warning", action.reason, action.message);
  }

  if (spec.spec.run_policy.suspend) {
    // A queued job gives its quota back: its Workload is deactivated, as
    // Kueue stops a job, and active again when the job resumes.
    Status held = Hold(job, status, spec, &cluster, launch, &state, "JobSuspended",
                       queue.empty() ? "the job is suspended (spec.runPolicy.suspend); its pods "
                                       "are deleted"
                                     : "the job is suspended (spec.runPolicy.suspend); its pods "
                                       "are deleted and its Kueue Workload deactivated, giving its "
                                       "quota back: resumed, it queues again",
                       result);
    if (held.ok() && !queue.empty() && known_pods.empty() && !DeactivateWorkload(job, id))
      result->requeue_after = kueue.recheck;  // without a watch on Workloads: look again
    return held;
  }
  if (!queue.empty() && !kueue.admitted) {
    Status held =
        Hold(job, status, spec, &cluster, launch, &state, kueue.reason, kueue.message, result);
    // The quota goes back once no pod of the job is left, terminating ones
    // included (servers write a last checkpoint on SIGTERM), as Kueue's own
    // job integrations do: before, another job could be admitted onto
    // capacity that these pods still hold.
    bool wrote = false;  // to the Workload: looked at again until the write shows
    if (held.ok() && !kueue.remake_because.empty() && known_pods.empty()) {
      DeleteWorkload(job, id, kueue.workload, kueue.remake_because, &state);
      wrote = true;
    } else if (held.ok() && kueue.give_back_quota && known_pods.empty()) {
      GiveBackQuota(id, kueue.workload, kueue.message);
      wrote = true;
    }
    // Without a watch on Workloads: look again. With one, its events say
    // when, but a write refused (RBAC, a conflict) changes nothing to see.
    result->requeue_after = wrote && kueue.recheck.count() == 0 ? KueueGate::kPoll : kueue.recheck;
    return held;
  }

  std::string over_quota;  // "Kind name" of an object refused for exceeded quota
  std::string pending;     // what the job waits for before its pods
  if (Status s = EnsureOwnedObjects(id, spec, &state, &over_quota, &pending); !s.ok()) {
    if (s.code() == Status::Code::kResourceExhausted)
      return WaitForQuota(job, status, over_quota, s.message(), &state, result);
    if (s.code() != Status::Code::kFailedPrecondition) return s;
    return FailJob(job, "CreateFailed", s.message(), result);
  }
  if (!pending.empty()) {
    if (state.certificates_waited_since_ms < 0) state.certificates_waited_since_ms = NowMs();
    if (!state.certificates_wait_reported &&
        NowMs() - state.certificates_waited_since_ms > kCertificateWaitWarning.count()) {
      RecordEvent(job, "Warning", "CertificatesNotIssued", pending);
      state.certificates_wait_reported = true;
    }
    // A job with pods goes on (it may have to restart one); a new one gets
    // none yet: they would only wait on their volumes.
    if (pods.empty())
      return WaitBeforePods(job, status, "WaitingForCertificates", pending, kCertificateRecheck,
                            result);
    KLOG_INFO << id.namespace_ << "/" << id.name << ": " << pending;
  }
  ReportEvictions(job, pods, &state);
  if (Status s = TellDesiredWorkers(job, id, spec, pods, &state); !s.ok()) {
    // The pods the change needs are made all the same; the scheduler takes
    // the workers in once it hears. Said once, where kubectl describe shows it.
    KLOG_ERROR << id.namespace_ << "/" << id.name << ": " << s.message();
    if (!state.told_desired_failure) RecordEvent(job, "Warning", "ScaleNotDelivered", s.message());
    state.told_desired_failure = true;
  } else {
    state.told_desired_failure = false;
  }
  // Before the job logic, which may delete them: a pod that cannot start
  // is said once per pod and reason, where `kubectl describe tj` shows it.
  const int64_t now_ms = now_ms_ ? now_ms_() : NowMs();
  std::optional<int64_t> start_deadline_ms;  // the earliest podStartTimeoutSeconds ends
  for (const controller::ReplicaStatus& replica : cluster.List()) {
    if (replica.start_problem.empty()) continue;
    if (state.start_problems_reported.insert(replica.instance + "/" + replica.start_problem)
            .second) {
      RecordEvent(job, "Warning", replica.start_problem,
                  "pod " + replica.instance + " (" + replica.name.ToString() +
                      ") cannot start: " + replica.start_problem_message);
    }
    const int64_t timeout_s = spec.spec.run_policy.pod_start_timeout_seconds;
    if (timeout_s > 0 && replica.created_ms >= 0) {
      const int64_t deadline =
          state.timers.StartClock(replica.name, replica.created_ms) + timeout_s * 1000;
      start_deadline_ms = std::min(start_deadline_ms.value_or(deadline), deadline);
    }
  }
  controller::JobController controller(spec, &cluster, launch);
  controller.set_known_restarts(status.replica_restarts);
  controller.set_has_run(status.HasRun());
  if (!status.start_time.empty()) controller.set_start_ms(ToMs(ParseTime(status.start_time)));
  controller.set_timers(state.timers);
  ReadComputingWorkers(id, spec, pods, &state, &controller);
  controller::JobStatus observed = controller.Reconcile(now_ms);
  // What was refused stays in the status, not only in an Event that expires.
  if (!refusal.reason.empty() && !observed.finished()) observed.message += "; " + refusal.message;
  state.timers = controller.timers();

  for (const json& pod : cluster.CreatedPods()) state.created_pods.Created(pod, now);
  for (const auto& name : cluster.deleted()) state.created_pods.Deleted(name);
  for (const auto& name : cluster.created())
    RecordEvent(job, "Normal", "CreatedPod", "Created pod " + name);
  for (const auto& refusal : cluster.quota_refusals()) {
    if (state.quota_refusals_reported.insert(refusal.pod).second) {
      RecordEvent(
          job, "Warning", "ExceededQuota",
          "pod " + refusal.pod + " (" + refusal.replica + ") waits for quota: " + refusal.message);
    }
  }
  if (observed.restarts > state.restarts_reported) {
    metrics_
        ->Counter("kubeps_operator_replica_restarts_total",
                  "Replica pods re-created after a failure",
                  {{"job", id.name}, {"namespace", id.namespace_}})
        .Increment(observed.restarts - state.restarts_reported);
    state.restarts_reported = observed.restarts;
  }

  api::TrainingJobStatus next = BuildStatus(job, status, spec, observed);
  if (!cluster.quota_refusals().empty() && !observed.finished()) {
    // A pod waits for quota: say so where `kubectl get tj` and `describe`
    // look, instead of "starting replicas" (or, for a job that runs while
    // the pod it was scaled up to waits, after what runs).
    const KubeCluster::QuotaRefusal& first = cluster.quota_refusals().front();
    const std::string waits = "pod " + first.pod + " (" + first.replica +
                              ") waits for quota, the job goes on when it frees: " + first.message;
    const bool created = observed.phase == JobPhase::kCreated;
    if (created || observed.phase == JobPhase::kRunning) {
      next.message = created ? waits : next.message + "; " + waits;
      api::SetPhaseCondition(&next.conditions, observed.phase,
                             created ? "ExceededQuota" : observed.reason, next.message,
                             Rfc3339(Clock::now()));
    }
  }
  ReadProgress(id, pods, observed.phase == JobPhase::kRunning, observed.finished(), &state, &next);
  if (observed.phase == JobPhase::kRunning && !state.reported_running &&
      observed.workers.running == spec.spec.worker.replicas) {
    state.reported_running = true;
    auto created = ParseTime(job["metadata"].value("creationTimestamp", ""));
    metrics_
        ->Latency("kubeps_operator_job_startup_seconds",
                  "Time from a TrainingJob's creation to all its pods running")
        .Observe(std::chrono::duration<double>(Clock::now() - created).count());
  }
  // Running jobs are looked at again now and then: the linger after the
  // workers finish and activeDeadlineSeconds are measured in time.
  if (!observed.finished()) result->requeue_after = std::chrono::seconds(5);
  // ...and a queued one sooner, to see an eviction, where no watch on
  // Workloads tells of it.
  if (!observed.finished() && !queue.empty() && kueue.recheck.count() > 0)
    result->requeue_after =
        std::min<std::chrono::milliseconds>(result->requeue_after, kueue.recheck);
  // ...and when a pod that cannot start runs out of podStartTimeoutSeconds.
  if (!observed.finished() && start_deadline_ms) {
    result->requeue_after = std::min<std::chrono::milliseconds>(
        result->requeue_after,
        std::chrono::milliseconds(std::max<int64_t>(*start_deadline_ms - now_ms + 50, 50)));
  }
  // A finished job's pods may be deleted already (cleanPodPolicy): should
  // this write meet a conflict, the next reconcile writes this status again
  // instead of running the job logic on a job that looks unfinished.
  if (observed.finished()) state.terminal = next;
  if (next.SameExceptTimes(status)) return Status::Ok();
  return Write(job, next, result);
}

Status JobReconciler::Write(const json& job, const api::TrainingJobStatus& status,
                            ReconcileResult* result) {
  const std::string uid = job["metadata"].value("uid", "");
  bool stale = false;
  if (Status s = WriteStatus(job, status, &stale); !s.ok()) return s;
  if (stale) {
    result->requeue_after = std::chrono::milliseconds(250);
    return Status::Ok();
  }
  const api::TrainingJobStatus old = api::StatusFromJson(job.value("status", json::object()));
  if (status.phase != old.phase) {  // once, when it lands
    const bool bad =
        status.phase == api::JobPhase::kFailed || status.phase == api::JobPhase::kRestarting;
    std::string reason;
    for (const auto& condition : status.conditions) {
      if (status.phase && condition.type == api::ToString(*status.phase)) reason = condition.reason;
    }
    RecordEvent(job, bad ? "Warning" : "Normal", reason, status.message);
  }
  if (status.finished()) {
    jobs_.erase(uid);
    finished_.insert(uid);
  }
  return Status::Ok();
}

void JobReconciler::ReportEvictions(const json& job, const std::vector<json>& pods,
                                    JobState* state) {
  for (const auto& pod : pods) {
    const json& meta = pod["metadata"];
    const bool deleting = meta.contains("deletionTimestamp");
    const bool failed = pod.value("status", json::object()).value("phase", "") == "Failed";
    const json* disruption = DisruptionOf(pod);
    const bool refused = !deleting && RefusedByItsNodeShuttingDown(pod);
    controller::ReplicaName name{controller::ReplicaRole::kWorker, 0};
    if (!(disruption || refused) || !(deleting || failed) || !KubeCluster::ReplicaOf(pod, &name))
      continue;
    std::string what = "is being evicted", outcome = "it is re-created once it is gone";
    // The kubelet's words: the condition's where there is one, else the pod's.
    const json& words = disruption ? *disruption : pod["status"];
    if (refused) {
      what = "was refused by its node";
      outcome = "it is made again, not counted as a restart";
    } else if (!deleting && IsNodePressureEviction(pod)) {
      what = "was evicted by its node";
      outcome = "this counts as a failure under the job's restartPolicy";
    } else if (!deleting && EndedByItsNode(pod)) {
      what = "was ended by its node";
      outcome = "it is made again, not counted as a restart";
    } else if (!deleting) {
      continue;  // failed by itself as it was about to be evicted: its deletion is said
    }
    if (!state->evictions_reported.insert(meta.value("uid", "")).second) continue;
    const std::string message = "pod " + meta.value("name", "") + " (" + name.ToString() + ") " +
                                what + " (" + words.value("reason", "") + ": " +
                                words.value("message", "") + "); " + outcome;
    KLOG_INFO << IdentityOf(job).namespace_ << "/" << IdentityOf(job).name << ": " << message;
    RecordEvent(job, "Warning", refused ? "PodRefused" : "PodEvicted", message);
  }
}

void JobReconciler::ReadProgress(const JobIdentity& id, const std::vector<json>& pods, bool running,
                                 bool finished, JobState* state, api::TrainingJobStatus* status) {
  // A worker that has trained to the end said where it ended: that wins
  // over any probe, and needs none.
  if (auto summary = FinishedWorkerSummary(id, pods)) {
    ApplySummary(*summary, status);
  } else if (running) {
    ProbeWorker(pods, state, status);
  }
  SetProgressAndEta(finished, status);
}

void JobReconciler::ProbeWorker(const std::vector<json>& pods, JobState* state,
                                api::TrainingJobStatus* status) {
  // At most every 5 s: each new step written is a change to the job, which
  // brings the job back here; probing every time would loop. A probe that
  // got no answer waits as long: it cost this reconcile up to 300 ms.
  const auto started = std::chrono::steady_clock::now();
  if (state->last_probe_tried && started - *state->last_probe_tried < std::chrono::seconds(5))
    return;
  for (const auto& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kScheduler, 0};
    if (!KubeCluster::ReplicaOf(pod, &name) || name.role != controller::ReplicaRole::kWorker ||
        name.index != 0) {
      continue;
    }
    const std::string ip = pod.value("status", json::object()).value("podIP", "");
    if (ip.empty()) return;
    state->last_probe_tried = started;
    std::optional<WorkerProgress> probe = probe_(ip, kMetricsPort);
    if (!probe) return;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - state->last_probe).count();
    double rate = 0;  // unknown until two probes apart, and after a rollback
    if (state->last_steps >= 0 && probe->step >= state->last_steps && seconds > 0.5)
      rate = (probe->step - state->last_steps) / seconds;
    ApplyProbe(*probe, rate, status);
    state->last_steps = probe->step;
    state->last_probe = now;
    return;
  }
}

api::TrainingJobStatus JobReconciler::BuildStatus(const json& job,
                                                  const api::TrainingJobStatus& old,
                                                  const api::TrainingJob& spec,
                                                  const controller::JobStatus& observed) const {
  const std::string now = Rfc3339(Clock::now());
  api::TrainingJobStatus next = old;
  next.phase = observed.phase;
  next.message = observed.message;
  next.observed_generation = job["metadata"].value("generation", int64_t{0});
  api::SetPhaseCondition(&next.conditions, observed.phase, observed.reason, observed.message, now);
  auto counts = [&observed](const controller::RoleCounts& c, controller::ReplicaRole role) {
    int restarts = 0;
    for (const auto& [name, n] : observed.replica_restarts) {
      if (name.rfind(std::string(controller::ToString(role)) + "-", 0) == 0) restarts += n;
    }
    return api::ReplicaStatus{c.active, c.succeeded, c.failed, restarts};
  };
  next.replica_statuses = {
      {"scheduler", counts(observed.scheduler, controller::ReplicaRole::kScheduler)},
      {"ps", counts(observed.servers, controller::ReplicaRole::kServer)},
      {"worker", counts(observed.workers, controller::ReplicaRole::kWorker)}};
  next.replica_restarts = observed.replica_restarts;
  next.workers = std::to_string(observed.workers.active + observed.workers.succeeded) + "/" +
                 std::to_string(spec.spec.worker.replicas);
  next.worker_replicas = observed.workers.active;
  next.fixed_workers =
      spec.spec.elastic.enabled() ? std::nullopt : std::optional<int>(spec.spec.worker.replicas);
  next.worker_selector = std::string(kJobNameLabel) + "=" + job["metadata"].value("name", "") +
                         "," + kReplicaTypeLabel + "=worker";
  if (next.start_time.empty()) next.start_time = now;
  if (observed.finished() && next.completion_time.empty()) next.completion_time = now;
  return next;
}

Status JobReconciler::FailJob(const json& job, const std::string& reason,
                              const std::string& message, ReconcileResult* result) {
  api::TrainingJobStatus status = api::StatusFromJson(job.value("status", json::object()));
  if (status.phase == api::JobPhase::kFailed) return Status::Ok();
  const std::string now = Rfc3339(Clock::now());
  status.phase = api::JobPhase::kFailed;
  status.message = message;
  api::SetPhaseCondition(&status.conditions, api::JobPhase::kFailed, reason, message, now);
  status.completion_time = now;
  return Write(job, status, result);
}

// A Service or the Secret refused for exceeded quota: the job says so, as
// for a pod, and looks again later (the operator does not watch quotas).
Status JobReconciler::WaitForQuota(const json& job, const api::TrainingJobStatus& status,
                                   const std::string& object, const std::string& message,
                                   JobState* state, ReconcileResult* result) {
  if (state->quota_refusals_reported.insert(object).second)
    RecordEvent(job, "Warning", "ExceededQuota", message);
  return WaitBeforePods(job, status, "ExceededQuota", message, kQuotaRecheck, result);
}

Status JobReconciler::WaitBeforePods(const json& job, const api::TrainingJobStatus& status,
                                     const std::string& reason, const std::string& message,
                                     std::chrono::milliseconds recheck, ReconcileResult* result) {
  api::TrainingJobStatus next = status;
  // A job that has started (a Service deleted from outside) stays in its
  // phase: it is not new again.
  if (status.start_time.empty() || !status.phase) next.phase = api::JobPhase::kCreated;
  next.message = message;
  api::SetPhaseCondition(&next.conditions, *next.phase, reason, message, Rfc3339(Clock::now()));
  result->requeue_after = recheck;
  if (next.SameExceptTimes(status)) return Status::Ok();
  return Write(job, next, result);
}

Status JobReconciler::Hold(const json& job, const api::TrainingJobStatus& status,
                           const api::TrainingJob& spec, KubeCluster* cluster,
                           const controller::LaunchBuilder& launch, JobState* state,
                           const std::string& reason, const std::string& message,
                           ReconcileResult* result) {
  controller::JobController stop(spec, cluster, launch);
  stop.DeleteAll();
  // Deleted, perhaps before the cache showed them: expected no more.
  for (const auto& name : cluster->deleted()) state->created_pods.Deleted(name);
  api::TrainingJobStatus next = status;
  next.phase = api::JobPhase::kSuspended;
  next.message = message;
  // activeDeadlineSeconds counts from when the job runs again, as a Job's
  // startTime is reset on resume: time spent held (queued by Kueue, or
  // suspended) is not the job's.
  next.start_time.clear();
  // Suspended, its pods gone, it starts again with as many workers as it
  // asks for then. Held by Kueue, it keeps them: its Workload's pod counts.
  if (spec.spec.run_policy.suspend) next.fixed_workers.reset();
  api::SetPhaseCondition(&next.conditions, api::JobPhase::kSuspended, reason, message,
                         Rfc3339(Clock::now()));
  if (next.SameExceptTimes(status)) return Status::Ok();
  return Write(job, next, result);
}

Status JobReconciler::EnsureOwnedObjects(const JobIdentity& id, const api::TrainingJob& spec,
                                         JobState* state, std::string* over_quota,
                                         std::string* pending) {
  const size_t replicas = controller::AllReplicas(spec).size();
  const auto now = std::chrono::steady_clock::now();
  if (state->owned_objects_for == replicas) {
    // Made; looked at again now and then, so that one deleted since (a
    // Service, by hand) is made anew. Not the token Secret: the running
    // pods hold its token, which a new one would not match.
    if (now < state->owned_objects_checked + options_.owned_objects_recheck) return Status::Ok();
    state->owned_objects_checked = now;
    for (const auto& [path, object] : JobObjects(id, spec)) {
      if (Status s = EnsureObject(id, path, object, over_quota); !s.ok()) return s;
    }
    return Status::Ok();
  }
  Response secret;
  if (Status s = client_->Get(ObjectPath(kSecrets, id.namespace_, TokenSecretName(id)), &secret);
      !s.ok())
    return s;
  if (secret.ok() && !OwnedBy(secret.body, id)) return WaitForPredecessor("Secret", secret.body);
  std::vector<std::pair<std::string, json>> wanted = JobObjects(id, spec);
  if (secret.code == 404) {
    wanted.push_back({CollectionPath(kSecrets, id.namespace_),
                      BuildTokenSecret(id, RandomToken(), spec.spec.tls, state->tls_issuer)});
  }
  for (const auto& [path, object] : wanted) {
    if (Status s = EnsureObject(id, path, object, over_quota); !s.ok()) return s;
  }
  if (secret.code == 404) {
    if (Status s = CheckRecordedTls(id, spec, state); !s.ok()) return s;
  }
  if (Status s = EnsureTls(id, spec, state, over_quota, pending); !s.ok()) return s;
  if (pending->empty()) {
    state->owned_objects_for = replicas;
    state->owned_objects_checked = now;
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, json>> JobReconciler::JobObjects(
    const JobIdentity& id, const api::TrainingJob& spec) const {
  const std::string services = CollectionPath(kServices, id.namespace_);
  std::vector<std::pair<std::string, json>> objects = {{services, BuildHeadlessService(id)},
                                                       {services, BuildSchedulerService(id)}};
  if (options_.network_policy.enabled) {
    objects.push_back({CollectionPath(kNetworkPolicies, id.namespace_),
                       BuildNetworkPolicy(id, options_.network_policy.metrics_from)});
  }
  std::string group_path;
  json group = BuildPodGroup(id, spec, &group_path);
  if (!group.is_null()) objects.push_back({group_path, group});
  return objects;
}

Status JobReconciler::EnsureObject(const JobIdentity& id, const std::string& path,
                                   const json& object, std::string* over_quota) {
  const std::string kind = object["kind"], name = object["metadata"]["name"];
  // Looked up before it is created: an API server runs quota admission
  // before it finds the name taken, so in a namespace at its quota the
  // POST of an object this job already has (after an operator restart)
  // comes back 403 "exceeded quota", not 409.
  Response existing;
  if (Status s = client_->Get(path + "/" + name, &existing); !s.ok()) return s;
  if (existing.ok()) {
    if (!OwnedBy(existing.body, id)) return WaitForPredecessor(kind, existing.body);
    return Status::Ok();
  }
  Response created;
  if (Status s = client_->Post(path, object, &created); !s.ok()) return s;
  if (created.code == 409) {  // made since the look-up: ours, or a predecessor's
    if (Status s = client_->Get(path + "/" + name, &existing); !s.ok()) return s;
    if (existing.ok() && !OwnedBy(existing.body, id))
      return WaitForPredecessor(kind, existing.body);
  } else if (ExceededQuota(created)) {
    // As for pods: quota frees as other jobs end, or is raised.
    *over_quota = kind + " " + name;
    return Status::ResourceExhausted(kind + " " + name + " waits for quota, the job goes on " +
                                     "when it frees: " + created.Describe());
  } else if (!created.ok()) {
    const std::string message = "creating " + kind + " " + name + ": " + created.Describe();
    // Forbidden (RBAC, admission), a kind the cluster does not serve (no
    // PodGroup CRD) or an object it refuses: retrying will not help, and the
    // user must see why in the job, not only in the operator's log.
    if (created.code == 403 || created.code == 404 || created.code == 422)
      return Status::FailedPrecondition(message);
    return Status::Error(message);
  }
  return Status::Ok();
}

Status JobReconciler::WaitForPredecessor(const std::string& kind, const json& object) {
  // Kubernetes deletes a deleted job's dependents in the background, seconds
  // later; until then its Secret, Services and pods hold our names. Adopting
  // them would lose them to the garbage collector: wait, and try again.
  return Status::Unavailable(kind + " " + object["metadata"].value("name", "") +
                             " is not owned by this job: an earlier job of this name's, waiting "
                             "for the garbage collector to delete it");
}

Status JobReconciler::WriteStatus(const json& job, const api::TrainingJobStatus& status,
                                  bool* stale) {
  const JobIdentity id = IdentityOf(job);
  json object = job;  // carries the resourceVersion it was read at
  object["status"] = api::ToJson(status);
  Response response;
  if (Status s = client_->Put(JobPath(id, "status"), object, &response); !s.ok()) return s;
  *stale = response.code == 409;
  if (response.ok() || response.code == 404 || *stale) return Status::Ok();  // 404: deleted
  if (response.code == 422) ReportStatusRefusal(job, response);
  return Status::Error("writing the status of " + id.name + ": " + response.Describe());
}

// Invalid: no status lands until what the API server refuses changes, so it
// is said once for the fields it names. Of the job's spec: a CRD rule added
// since the job was written, on a server before Kubernetes 1.30, which does
// not ratchet them. Of its status: a CRD older than this operator (Helm
// never upgrades a chart's CRDs). Otherwise (an admission policy on the
// status) the server's words alone.
void JobReconciler::ReportStatusRefusal(const json& job, const Response& response) {
  std::set<std::string> fields;
  std::string key = "422 ";  // never the empty one of a job not reported yet
  if (response.body.is_object()) {
    key += response.body.value("reason", "") + ":";
    const json details = response.body.value("details", json::object());
    for (const json& cause :
         details.is_object() ? details.value("causes", json::array()) : json::array()) {
      if (cause.is_object()) fields.insert(cause.value("field", ""));
    }
  }
  std::string advice;
  bool spec = false, status = false;
  for (const std::string& field : fields) {
    key += field + ";";
    spec |= field.rfind("spec", 0) == 0;
    status |= field.rfind("status", 0) == 0;
  }
  if (spec) advice = "; kubeps validate the job, and correct its spec";
  if (status) {
    advice +=
        "; the TrainingJob CRD is older than this operator: apply its CRD (helm upgrade "
        "does not)";
  }
  std::string& reported = jobs_[IdentityOf(job).uid].status_refusal_reported;
  if (reported == key) return;
  reported = key;
  RecordEvent(job, "Warning", "StatusRefused",
              "the API server refuses this job's status (" + response.Describe() + ")" + advice);
}

void JobReconciler::RecordEvent(const json& job, const std::string& type, const std::string& reason,
                                const std::string& message) {
  const JobIdentity id = IdentityOf(job);
  const std::string now = Rfc3339(Clock::now());
  static std::mt19937_64 suffix(std::random_device{}());
  char name[96];
  std::snprintf(name, sizeof name, "%s.%016llx", id.name.c_str(),
                static_cast<unsigned long long>(suffix()));
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", id.namespace_}}},
                {"involvedObject",
                 {{"apiVersion", api::kApiVersion},
                  {"kind", api::kKind},
                  {"name", id.name},
                  {"namespace", id.namespace_},
                  {"uid", id.uid},
                  {"resourceVersion", job["metadata"].value("resourceVersion", "")}}},
                {"reason", reason.empty() ? "Update" : reason},
                {"message", message},
                {"type", type},
                {"count", 1},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"source", {{"component", "kubeps-operator"}}}};
  Response created;
  // Events are best effort, as in client-go's recorder: a lost one changes
  // nothing the job's status does not say.
  if (Status s = client_->Post(CollectionPath(kEvents, id.namespace_), event, &created);
      !s.ok() || !created.ok()) {
    KLOG_INFO << "event " << reason << " for " << id.name
              << " not recorded: " << (s.ok() ? created.Describe() : s.message());
  }
}

}  // namespace kubeps::kube
