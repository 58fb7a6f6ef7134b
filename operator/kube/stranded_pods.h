// Pods stranded on a lost node. When a node stops reporting (its machine
// died, or the network cut it off), Kubernetes marks it NotReady (Ready
// Unknown), taints it unreachable, and after the pods' toleration (300 s by
// default) deletes them; but only the node's kubelet finishes a pod's
// deletion, so they stay Terminating for good. A replica's pod has a fixed
// name (<job>-server-0), so its replacement cannot be created until the old
// one is gone: the job would wait forever.
//
// So, as a StatefulSet's operator does by hand ("non-graceful node
// shutdown"), a pod of the job that is still Terminating kStrandedMargin
// after its grace period ended, on a node that is not Ready or no longer
// exists, is deleted with gracePeriodSeconds=0 and a uid precondition, with
// a Warning Event and a log line. The risk: a node that is only cut off
// may still run the old process until it is back (its kubelet then stops
// it); kubeps tolerates a stale incarnation for a while (the scheduler
// tracks worker incarnations, a server restores from its checkpoint), but
// it is two copies of one replica for that time (docs/failures.md).
//
// Reading nodes needs a ClusterRole (get nodes); an operator limited to
// one namespace cannot, and then leaves such pods alone and says why.
//
// Not thread-safe: one per job, used by its reconcile.
#ifndef KUBEPS_OPERATOR_KUBE_STRANDED_PODS_H_
#define KUBEPS_OPERATOR_KUBE_STRANDED_PODS_H_

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

class StrandedPods {
 public:
  // Past the deletionTimestamp (the end of the grace period), how long a
  // healthy kubelet gets to finish: it reports within seconds.
  static constexpr std::chrono::seconds kStrandedMargin{10};

  struct Action {
    std::string pod;
    std::string reason;   // the Event's: ForceDeletedPod, StrandedPod
    std::string message;  // the Event's, and the log line's
  };
  // Force-deletes the job's stranded pods in `pods`; returns what it did
  // or could not do, each said once per pod.
  std::vector<Action> Release(KubeClient* client, const JobIdentity& job,
                              const std::vector<nlohmann::json>& pods,
                              std::chrono::system_clock::time_point now);

 private:
  std::set<std::string> reported_;  // pod uids
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_STRANDED_PODS_H_
