// Which version of Kueue's API a cluster serves. Kueue 0.15 added
// kueue.x-k8s.io/v1beta2 and Kueue 0.20 serves nothing else, so an
// operator that spoke only v1beta1 found no Workload kind there and held
// every queued job as if Kueue were not installed. The version is asked of
// the API server's discovery (GET /apis/kueue.x-k8s.io): v1beta2 where it
// is served, else v1beta1; asked again whenever the Workload kind is not
// found (Kueue installed, upgraded or removed since: MayBeStale404).
//
// Thread-safe: the reconciler and the Workload watch share one.
#ifndef KUBEPS_OPERATOR_KUBE_KUEUE_API_H_
#define KUBEPS_OPERATOR_KUBE_KUEUE_API_H_

#include <mutex>
#include <string>

#include "operator/kubeclient/api_path.h"
#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

inline constexpr const char* kKueueGroup = "kueue.x-k8s.io";

class KueueApi {
 public:
  explicit KueueApi(KubeClient* client) : client_(client) {}

  // Asks discovery; whether it answered. Where it cannot answer now, the
  // version stays as it was and is asked again by the next EnsureDiscovered.
  bool Discover();
  // Discover, unless it has answered since the last Forget.
  void EnsureDiscovered();
  // Whether a 404 of a Kueue object may come of asking in a version the
  // cluster no longer serves (Kueue upgraded since, or discovery never
  // answered): asks discovery again; true where it cannot answer or now
  // names another version, and the caller tries again later instead of
  // taking the object for gone.
  bool MayBeStale404();

  std::string version() const;      // "v1beta2" or "v1beta1"
  std::string api_version() const;  // "kueue.x-k8s.io/<version>"
  Resource Workloads() const;
  Resource ResourceFlavors() const;
  Resource WorkloadPriorityClasses() const;

 private:
  KubeClient* client_;
  mutable std::mutex mutex_;
  std::string version_ = "v1beta1";  // what Kueue served before 0.15
  bool discovered_ = false;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_KUEUE_API_H_
