#include "operator/kube/stranded_pods.h"

#include "common/time_format.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;
using Clock = std::chrono::system_clock;

namespace {

const Resource kNodes{"", "v1", "nodes"};

// Why the node's kubelet is lost, in the node's words; "" when it is not.
// Only Ready Unknown says so: the node controller writes it once the kubelet
// stops reporting. Ready False comes from a kubelet that still reports (its
// runtime or network is not ready), whose containers may well run on.
std::string Unreachable(const json& node) {
  for (const auto& condition :
       node.value("status", json::object()).value("conditions", json::array())) {
    if (condition.value("type", "") != "Ready") continue;
    if (condition.value("status", "") != "Unknown") return "";
    return "Ready Unknown: " + condition.value("reason", "") +
           (condition.contains("message") ? ", " + condition.value("message", "") : "");
  }
  return "";
}

}  // namespace

std::vector<StrandedPods::Action> StrandedPods::Release(KubeClient* client, const JobIdentity& job,
                                                        const std::vector<json>& pods,
                                                        Clock::time_point now) {
  std::vector<Action> actions;
  for (const auto& pod : pods) {
    const json& meta = pod["metadata"];
    if (!meta.contains("deletionTimestamp") || !OwnedBy(pod, job)) continue;
    const std::string node_name = pod.value("spec", json::object()).value("nodeName", "");
    const std::string uid = meta.value("uid", ""), name = meta.value("name", "");
    const auto grace_ended = ParseTime(meta.value("deletionTimestamp", ""));
    if (node_name.empty() || now < grace_ended + kStrandedMargin || reported_.count(uid)) continue;
    Response node;
    if (Status s = client->Get("/api/v1/nodes/" + node_name, &node); !s.ok()) continue;
    std::string why;
    if (node.code == 404) {
      why = "node " + node_name + " no longer exists";
    } else if (node.code == 403) {
      reported_.insert(uid);
      actions.push_back(
          {name, "StrandedPod",
           "pod " + name + " is still Terminating past its grace period on node " + node_name +
               "; the operator may not read nodes (RBAC: get nodes, a ClusterRole) to tell "
               "whether the node is lost, so it leaves the pod: `kubectl delete pod " +
               name + " --force --grace-period=0` lets the replica be re-created"});
      continue;
    } else if (!node.ok()) {
      continue;  // tried again on the next pass
    } else if (std::string unreachable = Unreachable(node.body); !unreachable.empty()) {
      why = "node " + node_name + " is unreachable (" + unreachable + ")";
    } else {
      continue;  // a Ready node's kubelet will finish it
    }
    json options = DeleteOnlyUid(uid);
    options["gracePeriodSeconds"] = 0;
    Response deleted;
    if (Status s =
            client->DeleteWithOptions(ObjectPath(kPods, job.namespace_, name), options, &deleted);
        !s.ok() || (!deleted.ok() && deleted.code != 404 && deleted.code != 409)) {
      continue;  // tried again on the next pass
    }
    reported_.insert(uid);
    if (deleted.code == 409) continue;  // the precondition: that pod is gone already
    const auto stuck_s =
        std::chrono::duration_cast<std::chrono::seconds>(now - grace_ended).count();
    actions.push_back(
        {name, "ForceDeletedPod",
         "pod " + name + " was still Terminating " + std::to_string(stuck_s) +
             " s after its grace period, and " + why +
             ": deleted it with gracePeriodSeconds=0 so that its replica can be re-created (if "
             "the node is only cut off, the old process may run until the node is back)"});
  }
  return actions;
}

}  // namespace kubeps::kube
