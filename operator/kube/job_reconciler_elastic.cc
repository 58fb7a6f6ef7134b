// The scaling half of JobReconciler (job_reconciler.h): the number of
// workers the spec asks for (kubectl scale sets it through the scale
// subresource) reaches an elastic job's scheduler as its pod's annotation,
// which the pod reads through a downwardAPI volume; the scheduler then takes
// workers in or out at a step boundary (ps-server/elastic_workers.h), and
// the job logic creates and deletes the worker pods the change needs, a
// worker's once it has left, or 30 s after the scheduler's metrics say it
// no longer computes. A scale the job cannot follow (past its bounds; a
// job without a policy) is settled before the spec is parsed, and said.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "api/pod_env_codec.h"
#include "common/logging.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;

namespace {

std::string EnvValue(const json& pod, const char* variable) {
  for (const json& container : pod["spec"].value("containers", json::array())) {
    for (const json& env : container.value("env", json::array())) {
      if (env.value("name", "") == variable) return env.value("value", "");
    }
  }
  return "";
}

// A pod of job `id` that is not being deleted, and which of its replicas.
bool LiveReplica(const json& pod, const JobIdentity& id, controller::ReplicaName* name) {
  return OwnedBy(pod, id) && !pod["metadata"].contains("deletionTimestamp") &&
         KubeCluster::ReplicaOf(pod, name);
}

}  // namespace

std::optional<int> JobReconciler::StartedWorkers(const std::vector<json>& pods,
                                                 const JobIdentity& id) {
  std::optional<int> of_another_role;
  for (const json& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kWorker, 0};
    if (!LiveReplica(pod, id, &name)) continue;
    // An elastic scheduler's number is its annotation (a job whose policy
    // was taken away since); every pod's is the number it was made for.
    const json annotations = pod["metadata"].value("annotations", json::object());
    std::optional<int> workers = PositiveNumber(annotations.value(kDesiredWorkersAnnotation, ""));
    if (!workers) workers = PositiveNumber(EnvValue(pod, api::env::kNumWorkers));
    if (!workers) continue;
    if (name.role == controller::ReplicaRole::kScheduler) return workers;
    if (!of_another_role) of_another_role = workers;
  }
  return of_another_role;
}

JobReconciler::ScaleRefusal JobReconciler::SettleScaledWorkers(const api::TrainingJobStatus& status,
                                                               std::optional<int> started,
                                                               json* job) {
  // Looked at through a const view: operator[] of a missing key would add
  // a null the parser then reports as a wrong value.
  const json& read = *job;
  auto object_at = [](const json& parent, const char* key) -> const json& {
    static const json kNone;
    return parent.is_object() && parent.contains(key) ? parent[key] : kNone;
  };
  const json& spec = object_at(read, "spec");
  if (object_at(object_at(spec, "runPolicy"), "suspend") == true)
    return {};  // its pods go; it starts again with the spec's number
  const json& worker = object_at(object_at(spec, "replicaSpecs"), "worker");
  if (!object_at(worker, "replicas").is_number_integer()) return {};  // the parser's to report
  const int replicas = worker["replicas"].get<int>();
  auto set_replicas = [job](int n) { (*job)["spec"]["replicaSpecs"]["worker"]["replicas"] = n; };
  const std::string asked = "spec.replicaSpecs.worker.replicas " + std::to_string(replicas);
  // Read as the parser reads it; a value of the wrong type is its to report.
  auto bound = [&](const char* key) {
    const json& n = object_at(object_at(worker, "elasticPolicy"), key);
    return n.is_number_integer() ? n.get<int>() : 0;
  };
  const int low = bound("minReplicas"), high = bound("maxReplicas");
  if (low == 0 && high == 0) {  // no policy, or an empty one: as api::ElasticPolicy::enabled
    // Started once it has pods, though its status may not say so yet (a
    // write lost to a conflict with the scale itself).
    if (!started) started = status.fixed_workers;
    if (!started || *started == replicas) return {};
    set_replicas(*started);
    return {"ScaleRefused",
            asked + ": this job has no elasticPolicy; it trains on with its " +
                std::to_string(*started) +
                " workers (its pods are made for that number). The spec's number takes effect "
                "when the job starts again after a suspend (spec.runPolicy.suspend)"};
  }
  if (!job->contains("status") || !(*job)["status"].contains("phase")) return {};  // not started
  if (low < 1 || high < low || (replicas >= low && replicas <= high)) return {};
  const int nearest = std::clamp(replicas, low, high);
  set_replicas(nearest);
  return {"ScaleOutOfBounds", asked + " is outside elasticPolicy's [" + std::to_string(low) + ", " +
                                  std::to_string(high) + "]: the job trains with " +
                                  std::to_string(nearest) + " workers"};
}

Status JobReconciler::TellDesiredWorkers(const json& job, const JobIdentity& id,
                                         const api::TrainingJob& spec,
                                         const std::vector<json>& pods, JobState* state) {
  if (!spec.spec.elastic.enabled()) return Status::Ok();
  const std::string wanted = std::to_string(spec.spec.worker.replicas);
  if (state->desired_workers != spec.spec.worker.replicas) {
    if (state->desired_workers >= 0) {
      const std::string message = "workers scaled to " + wanted + " (from " +
                                  std::to_string(state->desired_workers) +
                                  "); the scheduler changes them at a step no worker has reached";
      KLOG_INFO << id.namespace_ << "/" << id.name << ": " << message;
      RecordEvent(job, "Normal", "Scaled", message);
    }
    state->desired_workers = spec.spec.worker.replicas;
  }
  for (const json& pod : pods) {
    const json& meta = pod["metadata"];
    controller::ReplicaName name{controller::ReplicaRole::kWorker, 0};
    if (!LiveReplica(pod, id, &name) || name.role != controller::ReplicaRole::kScheduler) continue;
    const json annotations = meta.value("annotations", json::object());
    if (annotations.value(kDesiredWorkersAnnotation, "") == wanted) continue;
    // A scheduler pod made again under the same name meanwhile got the
    // number from its own creation: patching it too changes nothing.
    const json patch = {{"metadata", {{"annotations", {{kDesiredWorkersAnnotation, wanted}}}}}};
    Response patched;
    const std::string path = ObjectPath(kPods, id.namespace_, meta.value("name", ""));
    if (Status s = client_->Patch(path, patch, &patched); !s.ok()) return s;
    if (!patched.ok() && patched.code != 404 && patched.code != 409) {
      return Status::Error("telling the scheduler pod " + meta.value("name", "") + " of " + wanted +
                           " workers: " + patched.Describe());
    }
  }
  return Status::Ok();
}

void JobReconciler::ReadComputingWorkers(const JobIdentity& id, const api::TrainingJob& spec,
                                         const std::vector<json>& pods, JobState* state,
                                         controller::JobController* controller) {
  if (!spec.spec.elastic.enabled()) return;
  std::string scheduler_ip;  // of its live pod, not one being deleted
  bool surplus = false;
  for (const json& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kScheduler, 0};
    if (!LiveReplica(pod, id, &name)) continue;
    if (name.role == controller::ReplicaRole::kScheduler)
      scheduler_ip = pod.value("status", json::object()).value("podIP", "");
    surplus = surplus || (name.role == controller::ReplicaRole::kWorker &&
                          name.index >= spec.spec.worker.replicas);
  }
  if (surplus && !scheduler_ip.empty()) {
    if (auto computing = computing_probe_(scheduler_ip, kMetricsPort))
      state->computing_workers = std::move(computing);
  }
  if (state->computing_workers) controller->SetComputingWorkers(*state->computing_workers);
}

}  // namespace kubeps::kube
