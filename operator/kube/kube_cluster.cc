#include "operator/kube/kube_cluster.h"

#include "common/logging.h"
#include "common/termination_message.h"
#include "common/time_format.h"
#include "operator/kubeclient/api_path.h"

#include <algorithm>
#include <chrono>
#include <set>

namespace kubeps::kube {

using controller::ReplicaName;
using controller::ReplicaPhase;
using controller::ReplicaRole;
using nlohmann::json;

namespace {

int IntAnnotation(const json& pod, const char* key, int otherwise) {
  const json& annotations = pod["metadata"].value("annotations", json::object());
  if (!annotations.contains(key)) return otherwise;
  try {
    return std::stoi(annotations.value(key, ""));
  } catch (...) {
    return otherwise;
  }
}

int Restarts(const json& pod) { return IntAnnotation(pod, kRestartsAnnotation, 0); }

// Pods made before the generation was written: their restarts named them.
int Generation(const json& pod) { return IntAnnotation(pod, kGenerationAnnotation, Restarts(pod)); }

bool IsDeleting(const json& pod) { return pod["metadata"].contains("deletionTimestamp"); }

// Waiting reasons of a container that does not start on its own: the
// kubelet keeps trying, but without a change (a pushed image, a created
// Secret) it never will. ContainerCreating and PodInitializing are not
// among them: a big image takes minutes to pull.
bool CannotStart(const std::string& waiting_reason) {
  static const std::set<std::string> kStuck = {
      "ErrImagePull",      "ImagePullBackOff",           "InvalidImageName",
      "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"};
  return kStuck.count(waiting_reason) > 0;
}

// Why the pod cannot start, into status->start_problem and its message:
// the scheduler found no node for it, or a container (an init container
// first, as the kubelet starts them first) waits for what will not come.
void ReadStartProblem(const json& pod_status, controller::ReplicaStatus* status) {
  for (const auto& condition : pod_status.value("conditions", json::array())) {
    if (condition.value("type", "") == "PodScheduled" && condition.value("status", "") == "False" &&
        condition.value("reason", "") == "Unschedulable") {
      status->start_problem = "Unschedulable";
      status->start_problem_message = condition.value("message", "");
      return;
    }
  }
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const auto& container : pod_status.value(list, json::array())) {
      const json waiting =
          container.value("state", json::object()).value("waiting", json::object());
      const std::string reason = waiting.value("reason", "");
      if (!CannotStart(reason)) continue;
      status->start_problem = reason;
      status->start_problem_message =
          "container " + container.value("name", "") + ": " + waiting.value("message", "");
      return;
    }
  }
}

// Whether no container of the pod ever ran: none running, none ended
// after it started (a kubelet restarted since writes ContainerStatusUnknown,
// with no start, for a pod it had rejected).
bool NoContainerRan(const json& pod_status) {
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const auto& container : pod_status.value(list, json::array())) {
      for (const char* state : {"state", "lastState"}) {
        const json& of = container.value(state, json::object());
        if (of.contains("running")) return false;
        const json terminated = of.value("terminated", json::object());
        if (terminated.value("startedAt", json()).is_string()) return false;
      }
    }
  }
  return true;
}

// A Failed pod its node ended (EndedByItsNode) was disrupted; one the
// kubelet refused to admit (a reason, no container ever ran) was rejected.
// Those and a node-pressure eviction failed in the kubelet's words where
// the pod has none of its own.
void ReadKubeletTermination(const json& pod, controller::ReplicaStatus* status) {
  const json& pod_status = pod["status"];
  const std::string reason = pod_status.value("reason", "");
  if (EndedByItsNode(pod)) {
    status->disrupted = true;
    return;
  }
  if (RefusedByItsNodeShuttingDown(pod)) {
    status->disrupted = status->rejected = true;
    status->node_refusals = IntAnnotation(pod, kNodeRefusalsAnnotation, 0) + 1;
    return;
  }
  if (!DisruptionOf(pod)) {
    if (reason.empty() || reason == "DeadlineExceeded" || !NoContainerRan(pod_status)) return;
    status->rejected = true;
  }
  if (status->reason.empty() && status->message.empty()) {
    status->reason = reason;
    status->message = pod_status.value("message", "");
  }
}

}  // namespace

const json* DisruptionOf(const json& pod) {
  const auto status = pod.find("status");
  if (status == pod.end() || !status->contains("conditions")) return nullptr;
  for (const auto& condition : (*status)["conditions"]) {
    if (condition.value("type", "") == "DisruptionTarget" &&
        condition.value("status", "") == "True")
      return &condition;
  }
  return nullptr;
}

bool EndedByItsNode(const json& pod) {
  const json* disruption = DisruptionOf(pod);
  if (!disruption || IsNodePressureEviction(pod)) return false;
  // The reasons that leave a pod Failed without deleting it first; the
  // others (an eviction, a preemption, the taint manager) delete it, and a
  // pod that failed in the moment before was the program's failure.
  const std::string by = disruption->value("reason", "");
  return by == "TerminationByKubelet" || by == "DeletionByPodGC";
}

bool RefusedByItsNodeShuttingDown(const json& pod) {
  const json& status = pod.value("status", json::object());
  return status.value("phase", "") == "Failed" && status.value("reason", "") == "NodeShutdown" &&
         NoContainerRan(status);
}

bool IsNodePressureEviction(const json& pod) {
  return pod.value("status", json::object()).value("reason", "") == "Evicted";
}

bool ExceededQuota(const Response& response) {
  if (response.code != 403 || !response.body.is_object()) return false;
  const auto message = response.body.find("message");
  return message != response.body.end() && message->is_string() &&
         message->get<std::string>().find("exceeded quota: ") != std::string::npos;
}

KubeCluster::KubeCluster(KubeClient* client, JobIdentity job, const api::TrainingJob& spec,
                         ImageSet images, std::vector<json> pods,
                         std::map<std::string, int> known_restarts)
    : client_(client),
      job_(std::move(job)),
      spec_(spec),
      images_(std::move(images)),
      known_restarts_(std::move(known_restarts)) {
  for (auto& pod : pods) {
    if (OwnedBy(pod, job_)) pods_.push_back(std::move(pod));
  }
}

std::string KubeCluster::PodsPath() const { return CollectionPath(kPods, job_.namespace_); }

bool KubeCluster::ReplicaOf(const json& pod, ReplicaName* name) {
  const json& labels = pod["metadata"].value("labels", json::object());
  const std::string type = labels.value(kReplicaTypeLabel, "");
  const std::string index = labels.value(kReplicaIndexLabel, "");
  if (type.empty() || index.empty()) return false;
  if (type == "scheduler")
    name->role = ReplicaRole::kScheduler;
  else if (type == "server")
    name->role = ReplicaRole::kServer;
  else if (type == "worker")
    name->role = ReplicaRole::kWorker;
  else
    return false;
  try {
    name->index = std::stoi(index);
  } catch (...) {
    return false;
  }
  return true;
}

controller::ReplicaStatus KubeCluster::StatusOf(const json& pod) {
  controller::ReplicaStatus status;
  ReplicaOf(pod, &status.name);
  status.restarts = Restarts(pod);
  status.instance = pod["metadata"].value("name", "");
  const std::string created = pod["metadata"].value("creationTimestamp", "");
  // ParseTime gives the epoch for a time that does not parse: unknown.
  const int64_t created_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(ParseTime(created).time_since_epoch())
          .count();
  if (created_ms > 0) status.created_ms = created_ms;
  const json& pod_status = pod.value("status", json::object());
  const std::string phase = pod_status.value("phase", "Pending");
  status.phase = phase == "Running"     ? ReplicaPhase::kRunning
                 : phase == "Succeeded" ? ReplicaPhase::kSucceeded
                 : phase == "Failed"    ? ReplicaPhase::kFailed
                                        : ReplicaPhase::kPending;
  // A container's termination message (/dev/termination-log): the first
  // with a reason wins.
  auto read_message = [&status](const json& terminated) {
    if (terminated.contains("message") && status.reason.empty()) {
      controller::ParseTerminationMessage(terminated.value("message", ""), &status.reason,
                                          &status.message);
    }
  };
  auto terminated_of = [](const json& container) {
    return container.value("state", json::object()).value("terminated", json::object());
  };
  for (const auto& container : pod_status.value("containerStatuses", json::array())) {
    const json terminated = terminated_of(container);
    if (terminated.contains("exitCode")) status.exit_code = terminated["exitCode"].get<int>();
    read_message(terminated);
  }
  // A worker's agent, a native sidecar (an init container), says why the
  // job's own program failed when the program cannot (it saw a shard
  // refuse a NaN gradient): read after the program's own words.
  for (const auto& container : pod_status.value("initContainerStatuses", json::array())) {
    read_message(terminated_of(container));
  }
  if (status.phase == ReplicaPhase::kPending) ReadStartProblem(pod_status, &status);
  if (status.phase == ReplicaPhase::kFailed) ReadKubeletTermination(pod, &status);
  // A pod the node lost or evicted has no exit code: treat it as killed.
  if (status.phase == ReplicaPhase::kFailed && status.exit_code == 0) status.exit_code = 137;
  return status;
}

std::vector<json> KubeCluster::CreatedPods() const {
  std::vector<json> created;
  for (const auto& pod : pods_) {
    const std::string name = pod["metadata"].value("name", "");
    if (std::find(created_.begin(), created_.end(), name) != created_.end()) created.push_back(pod);
  }
  return created;
}

std::map<ReplicaName, json> KubeCluster::Newest() const {
  std::map<ReplicaName, json> newest;
  for (const auto& pod : pods_) {
    ReplicaName name{ReplicaRole::kWorker, 0};
    if (!ReplicaOf(pod, &name) || IsDeleting(pod)) continue;
    auto it = newest.find(name);
    if (it == newest.end() || Generation(pod) > Generation(it->second)) newest[name] = pod;
  }
  return newest;
}

Status KubeCluster::Create(const controller::ReplicaLaunch& launch) {
  auto newest = Newest();
  auto existing = newest.find(launch.name);
  // A replica whose pod was deleted from outside keeps its count; the new
  // pod takes that count's name (-rN) once the deleted one is gone.
  auto known = known_restarts_.find(launch.name.ToString());
  int restarts = known == known_restarts_.end() ? 0 : known->second;
  int generation = restarts;
  int node_refusals = 0;
  if (existing != newest.end()) {
    controller::ReplicaStatus old = StatusOf(existing->second);
    node_refusals = old.node_refusals;
    if (old.phase != ReplicaPhase::kFailed && old.phase != ReplicaPhase::kSucceeded) {
      return Status::Error(launch.name.ToString() + " already has a live pod");
    }
    // A worker scaled away and wanted again joins anew: not a restart.
    const bool rejoins = old.phase == ReplicaPhase::kSucceeded && old.reason == kReasonScaledAway;
    restarts = std::max(restarts, old.restarts + (rejoins || old.disrupted ? 0 : 1));
    generation = std::max(restarts, Generation(existing->second) + 1);
  }
  json pod = BuildPod(job_, spec_, launch, restarts, images_, generation);
  if (node_refusals > 0) {
    pod["metadata"]["annotations"][kNodeRefusalsAnnotation] = std::to_string(node_refusals);
  }
  Response response;
  const std::string pod_name = pod["metadata"]["name"];
  // Unreachable, throttled (429) or failing over (5xx): the API server will
  // take the pod later, so the job logic tries again instead of failing.
  if (Status s = client_->Post(PodsPath(), pod, &response); !s.ok()) {
    return Status::Unavailable("creating pod " + pod_name + ": " + s.message());
  }
  if (!response.ok() && response.code != 409) {
    const std::string message = "creating pod " + pod_name + ": " + response.Describe();
    if (response.code == 429 || response.code >= 500) return Status::Unavailable(message);
    if (ExceededQuota(response)) {
      // Quota frees as other pods finish: wait, as the Job controller does.
      // A quota that the pod cannot meet at all ("must specify
      // requests.cpu") stays an error below: only a new template helps.
      quota_refusals_.push_back({pod_name, launch.name.ToString(), response.Describe()});
      return Status::Unavailable(message);
    }
    return Status::Error(message);
  }
  if (response.code == 409) {
    // An earlier reconcile made it (our cache has not seen it yet), or it is
    // a pod of a deleted job of the same name that the garbage collector has
    // not reached: that one is not ours to adopt.
    Response current;
    if (Status s = client_->Get(PodsPath() + "/" + pod_name, &current); !s.ok()) {
      return Status::Unavailable("reading pod " + pod_name + ": " + s.message());
    }
    if (current.ok() && !OwnedBy(current.body, job_)) {
      return Status::Unavailable("pod " + pod_name +
                                 " still belongs to an earlier job of this name; waiting for "
                                 "its deletion");
    }
    if (current.ok() && IsDeleting(current.body)) {
      // Ours, deleted from outside and still terminating: its name is
      // taken until it is gone.
      return Status::Unavailable("pod " + pod_name + " is still being deleted; waiting for it");
    }
    pods_.push_back(current.ok() ? current.body : pod);
  } else {
    created_.push_back(pod_name);
    pods_.push_back(response.body);
  }
  if (existing != newest.end()) {
    // The failed pod has told us what we needed; free its node resources.
    const std::string old_name = existing->second["metadata"]["name"];
    Response gone;
    if (Status s = client_->Delete(PodsPath() + "/" + old_name, &gone); !s.ok()) {
      KLOG_INFO << "deleting replaced pod " << old_name << ": " << s.message()
                << " (its job's deletion collects it)";
    }
    deleted_.push_back(old_name);
    pods_.erase(std::remove_if(pods_.begin(), pods_.end(),
                               [&](const json& p) { return p["metadata"]["name"] == old_name; }),
                pods_.end());
  }
  return Status::Ok();
}

Status KubeCluster::DeleteAll(const std::vector<ReplicaName>& names, int /*grace_ms*/) {
  Status first_error = Status::Ok();
  for (const ReplicaName& name : names) {
    std::vector<json> kept;
    for (const auto& pod : pods_) {
      ReplicaName of{ReplicaRole::kWorker, 0};
      if (!ReplicaOf(pod, &of) || !(of == name)) {
        kept.push_back(pod);
        continue;
      }
      const std::string pod_name = pod["metadata"]["name"];
      Response response;
      Status s = client_->Delete(PodsPath() + "/" + pod_name, &response);
      if (s.ok() && !response.ok() && response.code != 404)
        s = Status::Error("deleting pod " + pod_name + ": " + response.Describe());
      if (!s.ok()) {
        // The others are still deleted; this one stays known and is
        // deleted again by a later pass.
        if (first_error.ok()) first_error = s;
        kept.push_back(pod);
        continue;
      }
      deleted_.push_back(pod_name);
    }
    pods_ = std::move(kept);
  }
  return first_error;
}

std::vector<controller::ReplicaStatus> KubeCluster::List() {
  std::vector<controller::ReplicaStatus> all;
  for (const auto& [name, pod] : Newest()) {
    controller::ReplicaStatus status = StatusOf(pod);
    auto mount = mount_failures_.find(pod["metadata"].value("uid", ""));
    if (status.phase == ReplicaPhase::kPending && status.start_problem.empty() &&
        mount != mount_failures_.end()) {
      status.start_problem = "FailedMount";
      status.start_problem_message = mount->second;
    }
    all.push_back(std::move(status));
  }
  return all;
}

}  // namespace kubeps::kube
