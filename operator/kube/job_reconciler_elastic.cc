// The elastic half of JobReconciler (job_reconciler.h): the number of
// workers the spec asks for (kubectl scale sets it through the scale
// subresource) reaches the job's scheduler as its pod's annotation, which
// the pod reads through a downwardAPI volume; the scheduler then takes
// workers in or out at a step boundary (ps-server/elastic_workers.h), and
// the job logic creates and deletes the worker pods the change needs.
#include <algorithm>
#include <cstdlib>

#include "api/pod_env_codec.h"
#include "common/logging.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;

std::optional<int> JobReconciler::SchedulerWorkers(const std::vector<json>& pods,
                                                   const JobIdentity& id) {
  for (const json& pod : pods) {
    controller::ReplicaName name{controller::ReplicaRole::kWorker, 0};
    if (!OwnedBy(pod, id) || pod["metadata"].contains("deletionTimestamp") ||
        !KubeCluster::ReplicaOf(pod, &name) || name.role != controller::ReplicaRole::kScheduler) {
      continue;
    }
    for (const json& container : pod["spec"].value("containers", json::array())) {
      for (const json& env : container.value("env", json::array())) {
        if (env.value("name", "") != api::env::kNumWorkers) continue;
        const std::string value = env.value("value", "");
        char* end = nullptr;
        const long workers = std::strtol(value.c_str(), &end, 10);
        if (!value.empty() && *end == '\0' && workers > 0) return static_cast<int>(workers);
      }
    }
  }
  return std::nullopt;
}

JobReconciler::ScaleRefusal JobReconciler::SettleScaledWorkers(const api::TrainingJobStatus& status,
                                                               std::optional<int> started,
                                                               json* job) {
  if (!job->contains("status") || !(*job)["status"].contains("phase")) return {};  // not started
  json& worker = (*job)["spec"]["replicaSpecs"]["worker"];
  if (!worker.is_object() || !worker["replicas"].is_number()) return {};
  const int replicas = worker["replicas"].get<int>();
  const std::string asked = "spec.replicaSpecs.worker.replicas " + std::to_string(replicas);
  // Read as the parser reads it; a value of the wrong type is its to report.
  auto bound = [&worker](const char* key) {
    const json& policy = worker.contains("elasticPolicy") ? worker["elasticPolicy"] : json();
    return policy.is_object() && policy.contains(key) && policy[key].is_number_integer()
               ? policy[key].get<int>()
               : 0;
  };
  const int low = bound("minReplicas"), high = bound("maxReplicas");
  if (low == 0 && high == 0) {  // no policy, or an empty one: as api::ElasticPolicy::enabled
    if (!started) started = status.fixed_workers;
    if (!started || *started == replicas) return {};
    worker["replicas"] = *started;
    return {"ScaleRefused",
            asked + ": this job has no elasticPolicy; it trains on with its " +
                std::to_string(*started) +
                " workers (its scheduler knows that number). The spec's number takes effect "
                "when the job starts again after a suspend (spec.runPolicy.suspend)"};
  }
  if (low < 1 || high < low || (replicas >= low && replicas <= high)) return {};
  const int nearest = std::clamp(replicas, low, high);
  worker["replicas"] = nearest;
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
    if (!OwnedBy(pod, id) || meta.contains("deletionTimestamp") ||
        !KubeCluster::ReplicaOf(pod, &name) || name.role != controller::ReplicaRole::kScheduler) {
      continue;
    }
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

}  // namespace kubeps::kube
