// Why a pod waits in ContainerCreating. A volume the kubelet cannot set up
// (a ConfigMap or Secret that does not exist, a key it lacks) leaves no
// trace in the pod's status: the containers wait with reason
// ContainerCreating, as they do while an image is pulled, and only the
// kubelet's Warning Events (reason FailedMount, "MountVolume.SetUp failed
// for volume \"data\" : configmap \"x\" not found") say why. This looks
// those Events up, by the pod's uid, for the pods that wait so.
//
// The kubelet keeps retrying a mount (a ConfigMap created later mends it),
// so a failed mount is a reason to wait within podStartTimeoutSeconds, not
// to fail at once.
//
// Not thread-safe: one per job, used by its reconcile.
#ifndef KUBEPS_OPERATOR_KUBE_MOUNT_FAILURES_H_
#define KUBEPS_OPERATOR_KUBE_MOUNT_FAILURES_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

class MountFailures {
 public:
  // A pod is looked up once it has waited this long (a mount takes
  // moments), then again at most this often.
  static constexpr std::chrono::seconds kLookupInterval{3};
  // A FailedMount Event older than this says nothing of now: the kubelet
  // repeats it at least every two minutes while the mount keeps failing.
  static constexpr std::chrono::minutes kStaleAfter{3};

  // The newest FailedMount message of every pod in `pods` that waits in
  // ContainerCreating, by pod uid. Lists Events only for pods not looked up
  // within kLookupInterval; a failed list keeps what was known.
  std::map<std::string, std::string> Refresh(KubeClient* client,
                                             const std::vector<nlohmann::json>& pods,
                                             std::chrono::system_clock::time_point now);

 private:
  struct Known {
    std::chrono::system_clock::time_point looked_up;
    std::string message;  // "" when the pod has no recent FailedMount
  };
  std::map<std::string, Known> by_uid_;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_MOUNT_FAILURES_H_
