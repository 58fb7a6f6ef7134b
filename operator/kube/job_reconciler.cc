#include "operator/kube/job_reconciler.h"

#include <random>

#include "common/logging.h"
#include "operator/controller/replica_env.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kube/progress_probe.h"
#include "operator/kube/time_format.h"

namespace kubeps::kube {

using controller::JobPhase;
using nlohmann::json;
using Clock = std::chrono::system_clock;

namespace {

JobIdentity IdentityOf(const json& job) {
  const json& meta = job["metadata"];
  return {meta.value("name", ""), meta.value("namespace", "default"), meta.value("uid", "")};
}

std::string JobPath(const JobIdentity& id) {
  return "/apis/kubeps.io/v1alpha1/namespaces/" + id.namespace_ + "/trainingjobs/" + id.name;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
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

// Conditions as Kubeflow keeps them: one per type, the current one True,
// the others that no longer hold False; transitions time-stamped.
json UpdateConditions(json conditions, const std::string& current, const std::string& reason,
                      const std::string& message, const std::string& now) {
  if (!conditions.is_array()) conditions = json::array();
  bool found = false;
  for (auto& c : conditions) {
    const std::string type = c.value("type", "");
    const bool active = type == current;
    const std::string status = active ? "True" : "False";
    if (active) {
      found = true;
      if (c.value("reason", "") != reason || c.value("message", "") != message) c["lastUpdateTime"] = now;
      c["reason"] = reason;
      c["message"] = message;
    }
    // Every condition but the current one and Created stops holding
    // (Running ends, a resumed job is no longer Suspended).
    if (c.value("status", "") != status && (active || type != "Created")) {
      if (type == "Suspended" && !active) c["reason"] = "JobResumed";
      c["status"] = status;
      c["lastTransitionTime"] = now;
    }
  }
  if (!found) {
    conditions.push_back({{"type", current}, {"status", "True"}, {"reason", reason},
                          {"message", message}, {"lastUpdateTime", now}, {"lastTransitionTime", now}});
  }
  return conditions;
}

// Status without its time stamps, to tell whether anything really changed.
json Comparable(json status) {
  if (!status.is_object()) return json::object();
  if (status.contains("conditions")) {
    json cleaned = json::array();
    for (auto c : status["conditions"]) {
      c.erase("lastUpdateTime");
      c.erase("lastTransitionTime");
      cleaned.push_back(c);
    }
    status["conditions"] = cleaned;
  }
  return status;
}

}  // namespace

JobReconciler::JobReconciler(KubeClient* client, ImageSet images, MetricsServer* metrics)
    : client_(client), images_(std::move(images)), metrics_(metrics) {}

void JobReconciler::Forget(const std::string& uid) { jobs_.erase(uid); }

Status JobReconciler::Reconcile(const json& job, const std::vector<json>& pods, ReconcileResult* result) {
  const JobIdentity id = IdentityOf(job);
  const json status = job.value("status", json::object());
  const std::string phase = status.value("phase", "");

  // A finished job only waits for its TTL.
  if (phase == "Succeeded" || phase == "Failed") {
    const int64_t ttl = job["spec"].value("runPolicy", json::object()).value("ttlSecondsAfterFinished", -1);
    if (ttl >= 0) {
      auto expires = ParseTime(status.value("completionTime", "")) + std::chrono::seconds(ttl);
      if (Clock::now() >= expires) {
        Response deleted;
        if (Status s = client_->Delete(JobPath(id), &deleted); !s.ok()) return s;
        if (!deleted.ok() && deleted.code != 404) {
          return Status::Error("deleting " + id.name + " after ttlSecondsAfterFinished: " + deleted.Describe());
        }
        KLOG_INFO << "deleted " << id.namespace_ << "/" << id.name << ": ttlSecondsAfterFinished passed";
        return Status::Ok();
      }
      result->requeue_after = std::chrono::duration_cast<std::chrono::milliseconds>(expires - Clock::now());
    }
    return Status::Ok();
  }

  api::ParseResult parsed = api::ParseTrainingJob(job.dump());
  if (!parsed.ok()) return FailInvalid(job, parsed.ErrorReport(id.name));
  api::TrainingJob spec = *parsed.job;
  spec.name = id.name;
  spec.namespace_ = id.namespace_;

  JobState& state = jobs_[id.uid];
  auto launch = [&spec](const controller::ReplicaName& name, const std::string& scheduler) {
    return controller::ReplicaLaunch{name, controller::ReplicaBinary(name), {},
                                     controller::ReplicaEnv(spec, name, scheduler)};
  };
  KubeCluster cluster(client_, id, spec, images_, pods);

  if (spec.spec.run_policy.suspend) {
    controller::JobController suspend(spec, &cluster, launch);
    suspend.DeleteAll();
    json next = status;
    next["phase"] = "Suspended";
    next["message"] = "the job is suspended (spec.runPolicy.suspend); its pods are deleted";
    next["conditions"] = UpdateConditions(status.value("conditions", json::array()), "Suspended",
                                          "JobSuspended", next["message"], Rfc3339(Clock::now()));
    if (Comparable(next) != Comparable(status)) {
      RecordEvent(job, "Normal", "Suspended", next["message"]);
      return WriteStatus(job, next);
    }
    return Status::Ok();
  }

  if (Status s = EnsureOwnedObjects(id, spec, &state); !s.ok()) return s;
  controller::JobController controller(spec, &cluster, launch);
  if (status.contains("startTime")) controller.set_start_ms(ToMs(ParseTime(status["startTime"])));
  controller.set_workers_done_ms(state.workers_done_ms);
  controller::JobStatus observed = controller.Reconcile(NowMs());
  state.workers_done_ms = controller.workers_done_ms();

  for (const auto& name : cluster.created()) RecordEvent(job, "Normal", "CreatedPod", "Created pod " + name);
  if (observed.restarts > state.restarts_reported) {
    metrics_->Counter("kubeps_operator_replica_restarts_total", "Replica pods re-created after a failure",
                      {{"job", id.name}, {"namespace", id.namespace_}})
        .Increment(observed.restarts - state.restarts_reported);
    state.restarts_reported = observed.restarts;
  }

  json next = BuildStatus(job, spec, observed);
  if (observed.phase == JobPhase::kRunning) ProbeProgress(pods, &state, &next);
  if (observed.phase == JobPhase::kRunning && !state.reported_running &&
      observed.workers.active == spec.spec.worker.replicas) {
    state.reported_running = true;
    auto created = ParseTime(job["metadata"].value("creationTimestamp", ""));
    metrics_->Latency("kubeps_operator_job_startup_seconds",
                      "Time from a TrainingJob's creation to all its pods running")
        .Observe(std::chrono::duration<double>(Clock::now() - created).count());
  }
  if (next.value("phase", "") != phase) {
    const bool bad = observed.phase == JobPhase::kFailed || observed.phase == JobPhase::kRestarting;
    RecordEvent(job, bad ? "Warning" : "Normal", observed.reason, observed.message);
  }
  if (observed.finished()) Forget(id.uid);
  // Running jobs are looked at again now and then: the linger after the
  // workers finish and activeDeadlineSeconds are measured in time.
  if (!observed.finished()) result->requeue_after = std::chrono::seconds(5);
  if (Comparable(next) == Comparable(status)) return Status::Ok();
  return WriteStatus(job, next);
}

void JobReconciler::ProbeProgress(const std::vector<json>& pods, JobState* state, json* status) {
  // At most every 5 s: each new step written is a change to the job, which
  // brings the job back here; probing every time would loop.
  if (state->last_steps >= 0 && std::chrono::steady_clock::now() - state->last_probe < std::chrono::seconds(5)) {
    return;
  }
  for (const auto& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kScheduler, 0};
    if (!KubeCluster::ReplicaOf(pod, &name) || name.role != controller::ReplicaRole::kWorker || name.index != 0) {
      continue;
    }
    const std::string ip = pod.value("status", json::object()).value("podIP", "");
    if (ip.empty()) return;
    std::optional<double> steps = ProbeSteps(ip, kMetricsPort);
    if (!steps) return;
    const auto now = std::chrono::steady_clock::now();
    (*status)["step"] = static_cast<int64_t>(*steps);
    const double seconds = std::chrono::duration<double>(now - state->last_probe).count();
    if (state->last_steps >= 0 && *steps >= state->last_steps && seconds > 0.5) {
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.1f", (*steps - state->last_steps) / seconds);
      (*status)["stepsPerSecond"] = rate;
    }
    state->last_steps = *steps;
    state->last_probe = now;
    return;
  }
}

json JobReconciler::BuildStatus(const json& job, const api::TrainingJob& spec,
                                const controller::JobStatus& observed) const {
  const json old = job.value("status", json::object());
  const std::string now = Rfc3339(Clock::now());
  json next = old.is_object() ? old : json::object();
  next["phase"] = controller::ToString(observed.phase);
  next["message"] = observed.message;
  next["observedGeneration"] = job["metadata"].value("generation", 0);
  next["conditions"] = UpdateConditions(old.value("conditions", json::array()), next["phase"],
                                        observed.reason, observed.message, now);
  auto counts = [](const controller::RoleCounts& c, int restarts) {
    return json{{"active", c.active}, {"succeeded", c.succeeded}, {"failed", c.failed}, {"restarts", restarts}};
  };
  next["replicaStatuses"] = {{"scheduler", counts(observed.scheduler, 0)},
                             {"ps", counts(observed.servers, 0)},
                             {"worker", counts(observed.workers, observed.restarts)}};
  next["workers"] = std::to_string(observed.workers.active + observed.workers.succeeded) + "/" +
                    std::to_string(spec.spec.worker.replicas);
  if (!next.contains("startTime")) next["startTime"] = now;
  if (observed.finished() && !next.contains("completionTime")) next["completionTime"] = now;
  return next;
}

Status JobReconciler::FailInvalid(const json& job, const std::string& message) {
  json status = job.value("status", json::object());
  if (!status.is_object()) status = json::object();
  if (status.value("phase", "") == "Failed") return Status::Ok();
  status["phase"] = "Failed";
  status["message"] = message;
  status["conditions"] = UpdateConditions(status.value("conditions", json::array()), "Failed",
                                          "InvalidSpec", message, Rfc3339(Clock::now()));
  status["completionTime"] = Rfc3339(Clock::now());
  RecordEvent(job, "Warning", "InvalidSpec", message);
  return WriteStatus(job, status);
}

Status JobReconciler::EnsureOwnedObjects(const JobIdentity& id, const api::TrainingJob& spec,
                                         JobState* state) {
  if (state->owned_objects_exist) return Status::Ok();
  const std::string core = "/api/v1/namespaces/" + id.namespace_;
  Response secret;
  if (Status s = client_->Get(core + "/secrets/" + TokenSecretName(id), &secret); !s.ok()) return s;
  std::vector<std::pair<std::string, json>> wanted = {{core + "/services", BuildHeadlessService(id)},
                                                      {core + "/services", BuildSchedulerService(id)}};
  if (secret.code == 404) wanted.push_back({core + "/secrets", BuildTokenSecret(id, RandomToken())});
  std::string group_path;
  json group = BuildPodGroup(id, spec, &group_path);
  if (!group.is_null()) wanted.push_back({group_path, group});
  for (const auto& [path, object] : wanted) {
    Response created;
    if (Status s = client_->Post(path, object, &created); !s.ok()) return s;
    if (!created.ok() && created.code != 409) {  // 409: it exists already
      return Status::Error("creating " + object["kind"].get<std::string>() + " " +
                           object["metadata"]["name"].get<std::string>() + ": " + created.Describe());
    }
  }
  state->owned_objects_exist = true;
  return Status::Ok();
}

Status JobReconciler::WriteStatus(const json& job, const json& status) {
  const JobIdentity id = IdentityOf(job);
  json object = job;
  for (int attempt = 0; attempt < 5; ++attempt) {
    object["status"] = status;
    Response response;
    if (Status s = client_->Put(JobPath(id) + "/status", object, &response); !s.ok()) return s;
    if (response.ok()) return Status::Ok();
    if (response.code == 404) return Status::Ok();  // the job was deleted meanwhile
    if (response.code != 409) return Status::Error("writing the status of " + id.name + ": " + response.Describe());
    // Conflict: someone changed the job since we read it; take the newest
    // version and write our status onto it.
    Response fresh;
    if (Status s = client_->Get(JobPath(id), &fresh); !s.ok()) return s;
    if (!fresh.ok()) return Status::Error("re-reading " + id.name + ": " + fresh.Describe());
    object = fresh.body;
  }
  return Status::Error("writing the status of " + id.name + ": conflict after 5 tries");
}

void JobReconciler::RecordEvent(const json& job, const std::string& type, const std::string& reason,
                                const std::string& message) {
  const JobIdentity id = IdentityOf(job);
  const std::string now = Rfc3339(Clock::now());
  static std::mt19937_64 suffix(std::random_device{}());
  char name[96];
  std::snprintf(name, sizeof name, "%s.%016llx", id.name.c_str(), static_cast<unsigned long long>(suffix()));
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", id.namespace_}}},
                {"involvedObject",
                 {{"apiVersion", api::kApiVersion}, {"kind", api::kKind}, {"name", id.name},
                  {"namespace", id.namespace_}, {"uid", id.uid},
                  {"resourceVersion", job["metadata"].value("resourceVersion", "")}}},
                {"reason", reason.empty() ? "Update" : reason},
                {"message", message},
                {"type", type},
                {"count", 1},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"source", {{"component", "kubeps-operator"}}}};
  Response created;
  client_->Post("/api/v1/namespaces/" + id.namespace_ + "/events", event, &created);
}

}  // namespace kubeps::kube
