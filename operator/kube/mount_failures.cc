#include "operator/kube/mount_failures.h"

#include "common/logging.h"
#include "common/time_format.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;
using Clock = std::chrono::system_clock;

namespace {

// Scheduled, not being deleted, Pending, with a container still waiting to
// be created: where a failed mount keeps a pod. The kubelet's default
// waiting reason is PodInitializing in a pod with init containers (the
// agent's native sidecar is one), ContainerCreating otherwise.
bool WaitsInContainerCreating(const json& pod) {
  if (pod["metadata"].contains("deletionTimestamp")) return false;
  if (pod.value("spec", json::object()).value("nodeName", "").empty()) return false;
  const json& status = pod.value("status", json::object());
  if (status.value("phase", "Pending") != "Pending") return false;
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const auto& container : status.value(list, json::array())) {
      const json waiting =
          container.value("state", json::object()).value("waiting", json::object());
      const std::string reason = waiting.value("reason", "");
      if (reason == "ContainerCreating" || reason == "PodInitializing") return true;
    }
  }
  return false;
}

// The newest recent FailedMount message among `events`, "" when none.
std::string NewestMessage(const json& events, Clock::time_point now) {
  std::string newest, message;
  for (const auto& event : events.value("items", json::array())) {
    std::string at = event.value("lastTimestamp", "");
    if (at.empty()) at = event.value("eventTime", "");
    if (at.empty() || now - ParseTime(at) > MountFailures::kStaleAfter) continue;
    if (at >= newest) {  // RFC 3339 in UTC sorts as time does
      newest = at;
      message = event.value("message", "");
    }
  }
  return message;
}

}  // namespace

std::map<std::string, std::string> MountFailures::Refresh(KubeClient* client,
                                                          const std::vector<json>& pods,
                                                          Clock::time_point now) {
  std::map<std::string, Known> kept;
  std::map<std::string, std::string> failures;
  for (const auto& pod : pods) {
    if (!WaitsInContainerCreating(pod)) continue;
    const json& meta = pod["metadata"];
    const std::string uid = meta.value("uid", "");
    const auto created = ParseTime(meta.value("creationTimestamp", ""));
    if (uid.empty() || now - created < kLookupInterval) continue;
    Known known;
    if (auto it = by_uid_.find(uid); it != by_uid_.end()) known = it->second;
    if (now - known.looked_up >= kLookupInterval) {
      // The Events of this pod alone: the API server filters them by field.
      const std::string path = CollectionPath(kEvents, meta.value("namespace", "default")) +
                               "?fieldSelector=involvedObject.uid%3D" + uid +
                               "%2Creason%3DFailedMount";
      Response response;
      if (Status s = client->Get(path, &response); !s.ok() || !response.ok()) {
        KLOG_INFO << "listing the FailedMount events of pod " << meta.value("name", "") << ": "
                  << (s.ok() ? response.Describe() : s.message());
      } else {
        known.message = NewestMessage(response.body, now);
      }
      known.looked_up = now;
    }
    if (!known.message.empty()) failures[uid] = known.message;
    kept[uid] = known;
  }
  by_uid_ = std::move(kept);  // pods that no longer wait are forgotten
  return failures;
}

}  // namespace kubeps::kube
