// Kubernetes REST paths, built in one place: "/api/v1/..." for the core
// group, "/apis/<group>/<version>/..." for the others, namespaced or across
// every namespace. Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_API_PATH_H_
#define KUBEPS_OPERATOR_KUBECLIENT_API_PATH_H_

#include <string>

namespace kubeps::kube {

// A namespaced resource type.
struct Resource {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kEvents{"", "v1", "events"};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases"};
inline const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies"};

inline std::string GroupVersionPath(const Resource& r) {
  return r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
}

// The list (and create) path; `namespace_` "" lists every namespace.
inline std::string CollectionPath(const Resource& r, const std::string& namespace_) {
  return GroupVersionPath(r) + (namespace_.empty() ? "" : "/namespaces/" + namespace_) + "/" +
         r.plural;
}

// One object, or one of its subresources ("status").
inline std::string ObjectPath(const Resource& r, const std::string& namespace_,
                              const std::string& name, const std::string& subresource = "") {
  return CollectionPath(r, namespace_) + "/" + name +
         (subresource.empty() ? "" : "/" + subresource);
}

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_API_PATH_H_
