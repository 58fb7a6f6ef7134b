// Which version of Kueue's API a cluster serves. Kueue 0.15 added
// kueue.x-k8s.io/v1beta2 and Kueue 0.20 serves nothing else, so an
// operator that spoke only v1beta1 found no Workload kind there and held
// every queued job as if Kueue were not installed. The versions are asked
// of the API server's discovery, for each kind, since each is a CRD of its
// own and an upgrade applied in part serves v1beta2 for some only: the
// group's versions (GET /apis/kueue.x-k8s.io), then each one's resources
// (GET /apis/kueue.x-k8s.io/<version>); a kind is asked for in v1beta2
// where that serves it, else in v1beta1. Asked again whenever a Workload is
// not found (Kueue installed, upgraded or removed since: MayBeStale404).
//
// Thread-safe: the reconciler and the Workload watch share one.
#ifndef KUBEPS_OPERATOR_KUBE_KUEUE_API_H_
#define KUBEPS_OPERATOR_KUBE_KUEUE_API_H_

#include <map>
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

  // Of the Workload kind, whose version decides the Workload's shape.
  std::string version() const;      // "v1beta2" or "v1beta1"
  std::string api_version() const;  // "kueue.x-k8s.io/<version>"
  Resource Workloads() const;
  Resource ResourceFlavors() const;
  Resource WorkloadPriorityClasses() const;

 private:
  Resource Of(const char* plural) const;

  KubeClient* client_;
  mutable std::mutex mutex_;
  // By plural; a kind not there is asked for in v1beta1, what Kueue served
  // before 0.15 (and what it is kept at while Kueue is not installed).
  std::map<std::string, std::string> versions_;
  bool discovered_ = false;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_KUEUE_API_H_
