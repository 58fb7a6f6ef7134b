#include "operator/kube/kueue_workload.h"

#include <cstdio>
#include <vector>

#include "operator/controller/replica_env.h"

namespace kubeps::kube {

using nlohmann::json;

namespace {

// Kueue's condition types and the reason it gives a Workload that waits.
constexpr const char* kAdmitted = "Admitted";
constexpr const char* kEvicted = "Evicted";
constexpr const char* kFinished = "Finished";
constexpr const char* kQuotaReserved = "QuotaReserved";

const json* FindCondition(const json& workload, const std::string& type) {
  // Pointers into `workload` itself, never into a copy.
  if (!workload.contains("status") || !workload["status"].is_object()) return nullptr;
  const json& status = workload["status"];
  if (!status.contains("conditions") || !status["conditions"].is_array()) return nullptr;
  for (const json& condition : status["conditions"]) {
    if (condition.value("type", "") == type) return &condition;
  }
  return nullptr;
}

bool IsTrue(const json* condition) {
  return condition != nullptr && condition->value("status", "") == "True";
}

// One role's pod set: the pod replica 0 of the role would run as, reduced
// to what Kueue's template holds (metadata: labels and annotations only).
json PodSet(const JobIdentity& job, const api::TrainingJob& spec, controller::ReplicaRole role,
            int count, const ImageSet& images) {
  const controller::ReplicaName name{role, 0};
  const controller::ReplicaLaunch launch{
      name, controller::ReplicaBinary(name), controller::ReplicaArgs(spec, name),
      controller::ReplicaEnv(spec, name, SchedulerAddress(job)), std::nullopt};
  json pod = BuildPod(job, spec, launch, 0, images);
  json metadata = {{"labels", pod["metadata"].value("labels", json::object())},
                   {"annotations", pod["metadata"].value("annotations", json::object())}};
  return {{"name", controller::ToString(role)},
          {"count", count},
          {"template", {{"metadata", metadata}, {"spec", pod["spec"]}}}};
}

}  // namespace

std::string QueueName(const json& job) {
  const json& meta = job.contains("metadata") ? job["metadata"] : json::object();
  const json labels = meta.value("labels", json::object());
  return labels.value(kQueueNameLabel, "");
}

std::string WorkloadName(const JobIdentity& job) {
  constexpr size_t kMaxName = 63, kHashDigits = 5;
  uint32_t hash = 2166136261u;  // FNV-1a: stable across builds and restarts
  for (unsigned char c : job.name + "/" + job.uid + "/" + api::kKind) hash = (hash ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", hash);
  std::string prefix = "trainingjob-" + job.name;
  prefix = prefix.substr(0, kMaxName - kHashDigits - 1);
  return prefix + "-" + std::string(hex, kHashDigits);
}

json BuildWorkload(const JobIdentity& job, const api::TrainingJob& spec, const std::string& queue,
                   const ImageSet& images, std::optional<int32_t> priority) {
  using controller::ReplicaRole;
  json pod_sets =
      json::array({PodSet(job, spec, ReplicaRole::kScheduler, 1, images),
                   PodSet(job, spec, ReplicaRole::kServer, spec.spec.ps.replicas, images),
                   PodSet(job, spec, ReplicaRole::kWorker, spec.spec.worker.replicas, images)});
  json owner = OwnerReference(job);
  owner["blockOwnerDeletion"] = true;
  json workload = {{"apiVersion", "kueue.x-k8s.io/v1beta1"},
                   {"kind", "Workload"},
                   {"metadata",
                    {{"name", WorkloadName(job)},
                     {"namespace", job.namespace_},
                     {"labels", {{kJobNameLabel, job.name}, {kQueueNameLabel, queue}}},
                     {"ownerReferences", json::array({owner})}}},
                   {"spec", {{"queueName", queue}, {"podSets", pod_sets}}}};
  const std::string& priority_class = spec.spec.scheduling_policy.priority_class;
  if (!priority_class.empty() && priority) {
    workload["spec"]["priorityClassName"] = priority_class;
    workload["spec"]["priority"] = *priority;
    workload["spec"]["priorityClassSource"] = "scheduling.k8s.io/priorityclass";
  }
  return workload;
}

WorkloadAdmission ReadAdmission(const json& workload) {
  WorkloadAdmission out;
  const json status = workload.value("status", json::object());
  const json admission = status.value("admission", json());
  out.quota_reserved = admission.is_object();
  out.finished = IsTrue(FindCondition(workload, kFinished));
  if (const json* evicted = FindCondition(workload, kEvicted); IsTrue(evicted)) {
    out.evicted = true;
    out.reason = evicted->value("reason", "");
    out.message = evicted->value("message", "");
    return out;
  }
  out.admitted = out.quota_reserved && IsTrue(FindCondition(workload, kAdmitted));
  if (out.admitted) {
    for (const json& assignment : admission.value("podSetAssignments", json::array())) {
      out.flavors[assignment.value("name", "main")] =
          assignment.value("flavors", std::map<std::string, std::string>{});
    }
  } else if (const json* reserved = FindCondition(workload, kQuotaReserved); reserved != nullptr) {
    out.reason = reserved->value("reason", "");
    out.message = reserved->value("message", "");
  }
  return out;
}

json WithCondition(json workload, const std::string& type, bool status, const std::string& reason,
                   const std::string& message, const std::string& now) {
  json& conditions = workload["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string value = status ? "True" : "False";
  json condition = {{"type", type},
                    {"status", value},
                    {"reason", reason},
                    {"message", message},
                    {"lastTransitionTime", now}};
  if (workload["metadata"].contains("generation"))
    condition["observedGeneration"] = workload["metadata"]["generation"];
  for (json& old : conditions) {
    if (old.value("type", "") != type) continue;
    if (old.value("status", "") == value)
      condition["lastTransitionTime"] = old["lastTransitionTime"];
    old = condition;
    return workload;
  }
  conditions.push_back(condition);
  return workload;
}

json WithoutQuotaReservation(json workload, const std::string& message, const std::string& now) {
  workload["status"].erase("admission");
  workload = WithCondition(std::move(workload), kQuotaReserved, false, "Pending", message, now);
  if (IsTrue(FindCondition(workload, kAdmitted)))
    workload = WithCondition(std::move(workload), kAdmitted, false, "NoReservation",
                             "The workload has no reservation", now);
  return workload;
}

void ApplyFlavorNodeLabels(const std::map<std::string, std::map<std::string, std::string>>& labels,
                           api::TrainingJob* spec) {
  const std::vector<std::pair<const char*, api::ReplicaSpec*>> roles = {
      {"scheduler", &spec->spec.scheduler},
      {"server", &spec->spec.ps},
      {"worker", &spec->spec.worker}};
  for (const auto& [pod_set, replica] : roles) {
    auto found = labels.find(pod_set);
    if (found == labels.end() || found->second.empty()) continue;
    json& pod_template = replica->template_override;
    if (pod_template.is_null()) pod_template = json::object();
    json& selector = pod_template["spec"]["nodeSelector"];
    if (!selector.is_object()) selector = json::object();
    for (const auto& [key, value] : found->second) {
      if (!selector.contains(key)) selector[key] = value;
    }
  }
}

}  // namespace kubeps::kube
