#include "operator/kube/kueue_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
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
  json pod_set = {{"name", controller::ToString(role)},
                  {"count", count},
                  {"template", {{"metadata", metadata}, {"spec", pod["spec"]}}}};
  // As Kueue's own integrations read the template's annotations: the first
  // of required, preferred, unconstrained.
  const json& annotations = metadata["annotations"];
  json topology;
  if (annotations.contains(kRequiredTopologyAnnotation)) {
    topology = {{"required", annotations[kRequiredTopologyAnnotation]}};
  } else if (annotations.contains(kPreferredTopologyAnnotation)) {
    topology = {{"preferred", annotations[kPreferredTopologyAnnotation]}};
  } else if (annotations.contains(kUnconstrainedTopologyAnnotation)) {
    // Read as Go's strconv.ParseBool reads it.
    static const std::set<std::string> kTrue = {"1", "t", "T", "TRUE", "true", "True"};
    topology = {{"unconstrained",
                 kTrue.count(annotations.value(kUnconstrainedTopologyAnnotation, "")) != 0}};
  }
  if (!topology.is_null()) {
    // Ranks next to each other land next to each other.
    topology["podIndexLabel"] = kReplicaIndexLabel;
    pod_set["topologyRequest"] = topology;
  }
  return pod_set;
}

// A resource quantity ("500m", "1Gi", "2", 1.5e3) as a number, as
// resource.Quantity reads it; nullopt for anything else.
std::optional<long double> QuantityValue(const json& quantity) {
  if (quantity.is_number()) return quantity.get<long double>();
  if (!quantity.is_string()) return std::nullopt;
  const std::string text = quantity.get<std::string>();
  size_t end = 0;
  long double number;
  try {
    number = std::stold(text, &end);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  static const std::map<std::string, long double> kSuffixes = {{"", 1},
                                                               {"n", 1e-9L},
                                                               {"u", 1e-6L},
                                                               {"m", 1e-3L},
                                                               {"k", 1e3L},
                                                               {"M", 1e6L},
                                                               {"G", 1e9L},
                                                               {"T", 1e12L},
                                                               {"P", 1e15L},
                                                               {"E", 1e18L},
                                                               {"Ki", 1024.0L},
                                                               {"Mi", 1048576.0L},
                                                               {"Gi", 1073741824.0L},
                                                               {"Ti", 1099511627776.0L},
                                                               {"Pi", 1125899906842624.0L},
                                                               {"Ei", 1152921504606846976.0L}};
  auto suffix = kSuffixes.find(text.substr(end));
  if (suffix == kSuffixes.end()) return std::nullopt;
  return number * suffix->second;
}

// Requests as Kueue counts them (workload.AdjustResources): a resource
// with a limit and no request requests its limit.
json EffectiveRequests(const json& resources) {
  json requests = resources.value("requests", json::object());
  const json limits = resources.value("limits", json::object());
  for (const auto& [name, limit] : limits.items()) {
    if (!requests.contains(name)) requests[name] = limit;
  }
  return requests;
}

// Equal as quantities: a Workload written back through Kueue's webhook has
// them canonical ("0.5" becomes "500m"), which must not read as a change.
bool SameRequests(const json& a, const json& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [container, requests] : a.items()) {
    if (!b.contains(container) || b[container].size() != requests.size()) return false;
    for (const auto& [name, quantity] : requests.items()) {
      if (!b[container].contains(name)) return false;
      const json& other = b[container][name];
      const auto x = QuantityValue(quantity), y = QuantityValue(other);
      if (x && y ? std::fabs(*x - *y) > 1e-12L * std::max(std::fabs(*x), 1.0L) : quantity != other)
        return false;
    }
  }
  return true;
}

struct PodSetQuota {
  json count;
  json min_count;  // null where the pod set has none
  json requests;   // container name -> its effective requests
  json tolerations;
};

std::map<std::string, PodSetQuota> PodSetQuotas(const json& workload) {
  std::map<std::string, PodSetQuota> sets;
  const json spec = workload.value("spec", json::object());
  for (const json& pod_set : spec.value("podSets", json::array())) {
    const json pod = pod_set.value("template", json::object()).value("spec", json::object());
    PodSetQuota quota{pod_set.value("count", json()), pod_set.value("minCount", json()),
                      json::object(), pod.value("tolerations", json::array())};
    for (const char* list : {"initContainers", "containers"}) {
      for (const json& container : pod.value(list, json::array())) {
        quota.requests[container.value("name", "")] =
            EffectiveRequests(container.value("resources", json::object()));
      }
    }
    sets[pod_set.value("name", "")] = quota;
  }
  return sets;
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
                   const ImageSet& images, const std::optional<WorkloadPriority>& priority,
                   const std::string& api_version) {
  using controller::ReplicaRole;
  json pod_sets =
      json::array({PodSet(job, spec, ReplicaRole::kScheduler, 1, images),
                   PodSet(job, spec, ReplicaRole::kServer, spec.spec.ps.replicas, images),
                   PodSet(job, spec, ReplicaRole::kWorker, spec.spec.worker.replicas, images)});
  // An elastic job trains with as few as minReplicas workers: Kueue may
  // admit it with fewer than it asks for, where only those fit (partial
  // admission). The others need all their pods.
  if (spec.spec.elastic.enabled()) pod_sets[2]["minCount"] = spec.spec.elastic.min_replicas;
  json owner = OwnerReference(job);
  owner["blockOwnerDeletion"] = true;
  json workload = {{"apiVersion", api_version},
                   {"kind", "Workload"},
                   {"metadata",
                    {{"name", WorkloadName(job)},
                     {"namespace", job.namespace_},
                     {"labels", {{kJobNameLabel, job.name}, {kQueueNameLabel, queue}}},
                     {"ownerReferences", json::array({owner})}}},
                   {"spec", {{"queueName", queue}, {"podSets", pod_sets}}}};
  if (priority) workload["spec"].update(PrioritySpec(*priority, api_version));
  return workload;
}

json PrioritySpec(const WorkloadPriority& priority, const std::string& api_version) {
  if (api_version == "kueue.x-k8s.io/v1beta1") {
    return {{"priority", priority.value},
            {"priorityClassName", priority.class_name},
            {"priorityClassSource", priority.source}};
  }
  const bool kueues = priority.source == kWorkloadPriorityClassSource;
  return {{"priority", priority.value},
          {"priorityClassRef",
           {{"group", kueues ? "kueue.x-k8s.io" : "scheduling.k8s.io"},
            {"kind", kueues ? "WorkloadPriorityClass" : "PriorityClass"},
            {"name", priority.class_name}}}};
}

std::string WorkloadPriorityClassOf(const json& workload) {
  const json spec = workload.value("spec", json::object());
  if (spec.value("priorityClassSource", "") == kWorkloadPriorityClassSource)
    return spec.value("priorityClassName", "");
  const json ref = spec.value("priorityClassRef", json::object());
  if (ref.value("group", "") == "kueue.x-k8s.io" &&
      ref.value("kind", "") == "WorkloadPriorityClass")
    return ref.value("name", "");
  return "";
}

std::optional<int32_t> MaximumExecutionSeconds(const json& job) {
  const json labels = job.value("metadata", json::object()).value("labels", json::object());
  return PositiveNumber(labels.value(kMaxExecutionTimeLabel, ""));
}

std::string PodSetChange(const json& workload, const json& wanted, bool reserved, bool admitted) {
  const auto had = PodSetQuotas(workload), now = PodSetQuotas(wanted);
  std::string change;
  auto add = [&change](const std::string& what) { change += (change.empty() ? "" : ", ") + what; };
  for (const auto& [name, quota] : now) {
    auto old = had.find(name);
    if (old == had.end()) {
      add(name + ": a new pod set");
    } else if (old->second.count != quota.count &&
               !(reserved && quota.count.is_number_integer() &&
                 old->second.count.is_number_integer() &&
                 quota.count.get<int64_t>() < old->second.count.get<int64_t>())) {
      add(name + ": " + quota.count.dump() + " pods, was " + old->second.count.dump());
    } else if (!admitted && old->second.min_count != quota.min_count) {
      add(name + ": at least " + quota.min_count.dump() + " pods, was " +
          old->second.min_count.dump());
    } else if (!SameRequests(old->second.requests, quota.requests)) {
      add(name + ": requests " + quota.requests.dump() + ", were " + old->second.requests.dump());
    } else if (!admitted && old->second.tolerations != quota.tolerations) {
      add(name + ": tolerations " + quota.tolerations.dump() + ", were " +
          old->second.tolerations.dump());
    }
  }
  for (const auto& [name, quota] : had) {
    if (!now.count(name)) add(name + ": no longer a pod set");
  }
  return change;
}

std::optional<int64_t> MadeForGeneration(const json& workload) {
  const json meta = workload.value("metadata", json::object());
  const json annotations = meta.value("annotations", json::object());
  const json made_for = annotations.value(kWorkloadJobGenerationAnnotation, json());
  if (!made_for.is_string()) return std::nullopt;
  const std::string text = made_for.get<std::string>();
  char* end = nullptr;
  const long long generation = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') return std::nullopt;
  return generation;
}

bool IsActive(const json& workload) {
  const json spec = workload.value("spec", json::object());
  return !(spec.contains("active") && spec["active"] == false);
}

bool IsDeactivation(const std::string& eviction_reason) {
  return eviction_reason == "InactiveWorkload" || eviction_reason.rfind("Deactivated", 0) == 0;
}

bool BeingDeleted(const json& workload) {
  return workload.contains("metadata") && workload["metadata"].contains("deletionTimestamp");
}

WorkloadAdmission ReadAdmission(const json& workload) {
  WorkloadAdmission out;
  out.workload = workload.value("metadata", json::object()).value("name", "");
  const json status = workload.value("status", json::object());
  const json admission = status.value("admission", json());
  out.quota_reserved = admission.is_object();
  out.finished = IsTrue(FindCondition(workload, kFinished));
  if (const json* evicted = FindCondition(workload, kEvicted); IsTrue(evicted)) {
    out.reason = evicted->value("reason", "");
    out.message = evicted->value("message", "");
    // Kueue evicts a deactivated Workload; active again (the job resumed)
    // with its reservation given back, it merely waits for its admission,
    // which clears the eviction. Still reserved, the reservation goes back
    // first: that is an eviction still.
    out.evicted = !(IsDeactivation(out.reason) && IsActive(workload) && !out.quota_reserved);
    if (out.evicted) return out;
    out.reason.clear();
    out.message.clear();
  }
  out.admitted = out.quota_reserved && IsTrue(FindCondition(workload, kAdmitted));
  if (out.admitted) {
    for (const json& assignment : admission.value("podSetAssignments", json::array())) {
      const std::string pod_set = assignment.value("name", "main");
      out.flavors[pod_set] = assignment.value("flavors", std::map<std::string, std::string>{});
      if (assignment.contains("count") && assignment["count"].is_number_integer())
        out.counts[pod_set] = assignment["count"].get<int>();
      if (assignment.contains("topologyAssignment")) out.topology_assigned.insert(pod_set);
    }
    for (const json& check : status.value("admissionChecks", json::array())) {
      std::set<std::string> read;  // as Kueue reads them: a check's first update of a pod set
      for (const json& update : check.value("podSetUpdates", json::array())) {
        const std::string pod_set = update.value("name", "main");
        if (read.insert(pod_set).second)
          out.pod_set_updates[pod_set].push_back({check.value("name", ""), update});
      }
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

PodsReadyCondition NextPodsReady(const json& workload, bool admitted, bool pods_ready) {
  const json* now = FindCondition(workload, "PodsReady");
  const std::string reason = now ? now->value("reason", "") : "";
  PodsReadyCondition next;
  next.ready = admitted && pods_ready;
  if (!admitted) {
    next.reason = "WaitForStart";
    next.message = "Not all pods are ready or succeeded";
  } else if (pods_ready) {
    next.reason = reason == "WaitForRecovery" || reason == "Recovered" ? "Recovered" : "Started";
    next.message = "All pods reached readiness and the workload is running";
  } else if (IsTrue(now) || reason == "WaitForRecovery") {
    next.reason = "WaitForRecovery";
    next.message = "At least one pod has failed, waiting for recovery";
  } else {
    next.reason = "WaitForStart";
    next.message = "Not all pods are ready or succeeded";
  }
  next.changed = now == nullptr || IsTrue(now) != next.ready || reason != next.reason;
  return next;
}

namespace {

// Kueue's MergeKeepFirst: each key of `more` that `into` lacks.
void AddMissingKeys(const json& more, json* into) {
  if (!into->is_object()) *into = json::object();
  for (const auto& [key, value] : more.items()) {
    if (!into->contains(key)) (*into)[key] = value;
  }
}

// Each entry (a toleration, a scheduling gate) of `more` that `into` lacks,
// in order.
void AddMissingEntries(const json& more, json* into) {
  if (!into->is_array()) *into = json::array();
  for (const json& entry : more) {
    if (std::find(into->begin(), into->end(), entry) == into->end()) into->push_back(entry);
  }
}

// The members of `object` whose values are strings (a label map as written).
json StringsOf(const json& object) {
  json out = json::object();
  if (!object.is_object()) return out;
  for (const auto& [key, value] : object.items()) {
    if (value.is_string()) out[key] = value;
  }
  return out;
}

// A key two placements set to different values.
struct KeyConflict {
  const char* what;  // "nodeSelector", "label", "annotation"
  std::string key;
  json first, second;
};

std::optional<KeyConflict> FindConflict(const PodSetPlacement& first,
                                        const PodSetPlacement& second) {
  const std::pair<const char*, const json PodSetPlacement::*> maps[] = {
      {"nodeSelector", &PodSetPlacement::node_selector},
      {"label", &PodSetPlacement::labels},
      {"annotation", &PodSetPlacement::annotations}};
  for (const auto& [what, member] : maps) {
    const json& mine = first.*member;
    for (const auto& [key, value] : (second.*member).items()) {
      auto found = mine.find(key);
      if (found != mine.end() && *found != value) return KeyConflict{what, key, *found, value};
    }
  }
  return std::nullopt;
}

// `nodeSelector "pool": "spot" against "gpu"`, `where_first` after the first value.
std::string Describe(const KeyConflict& conflict, const std::string& where_first = "") {
  return std::string(conflict.what) + " \"" + conflict.key + "\": " + conflict.first.dump() +
         where_first + " against " + conflict.second.dump();
}

// What a pod template already sets of what a placement adds.
PodSetPlacement TemplatePlacement(const json& pod_template) {
  if (!pod_template.is_object()) return {};
  const json spec = pod_template.value("spec", json::object());
  const json metadata = pod_template.value("metadata", json::object());
  return PlacementOfUpdate({{"nodeSelector", spec.value("nodeSelector", json::object())},
                            {"labels", metadata.value("labels", json::object())},
                            {"annotations", metadata.value("annotations", json::object())}});
}

}  // namespace

void PodSetPlacement::Add(const PodSetPlacement& more) {
  AddMissingKeys(more.node_selector, &node_selector);
  AddMissingEntries(more.tolerations, &tolerations);
  AddMissingEntries(more.scheduling_gates, &scheduling_gates);
  AddMissingKeys(more.labels, &labels);
  AddMissingKeys(more.annotations, &annotations);
}

PodSetPlacement PlacementOfUpdate(const json& update) {
  PodSetPlacement placement;
  placement.node_selector = StringsOf(update.value("nodeSelector", json::object()));
  placement.labels = StringsOf(update.value("labels", json::object()));
  placement.annotations = StringsOf(update.value("annotations", json::object()));
  for (const json& toleration : update.value("tolerations", json::array())) {
    if (toleration.is_object()) placement.tolerations.push_back(toleration);
  }
  return placement;
}

std::string Conflict(const PodSetPlacement& first, const PodSetPlacement& second) {
  const std::optional<KeyConflict> conflict = FindConflict(first, second);
  return conflict ? Describe(*conflict) : "";
}

std::string ApplyPodSetPlacement(const std::map<std::string, PodSetPlacement>& placement,
                                 api::TrainingJob* spec) {
  const std::vector<std::pair<const char*, api::ReplicaSpec*>> roles = {
      {"scheduler", &spec->spec.scheduler},
      {"server", &spec->spec.ps},
      {"worker", &spec->spec.worker}};
  std::string first_conflict;
  for (const auto& [pod_set, replica] : roles) {
    auto found = placement.find(pod_set);
    if (found == placement.end()) continue;
    const PodSetPlacement& more = found->second;
    json& pod_template = replica->template_override;
    if (first_conflict.empty()) {
      const PodSetPlacement own = TemplatePlacement(pod_template);
      if (const std::optional<KeyConflict> conflict = FindConflict(own, more))
        first_conflict = pod_set + std::string(": ") + Describe(*conflict, " in its pod template");
    }
    // Only what the placement has: a template gets no empty map or list.
    auto add = [&pod_template](const json& values, const char* part, const char* field,
                               auto merge) {
      if (!values.empty()) merge(values, &pod_template[part][field]);
    };
    add(more.node_selector, "spec", "nodeSelector", AddMissingKeys);
    add(more.tolerations, "spec", "tolerations", AddMissingEntries);
    add(more.scheduling_gates, "spec", "schedulingGates", AddMissingEntries);
    add(more.labels, "metadata", "labels", AddMissingKeys);
    add(more.annotations, "metadata", "annotations", AddMissingKeys);
  }
  return first_conflict;
}

}  // namespace kubeps::kube
