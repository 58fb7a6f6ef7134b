#include "operator/kube/kueue_api.h"

#include <nlohmann/json.hpp>

#include "common/logging.h"

namespace kubeps::kube {

namespace {

constexpr const char* kOlder = "v1beta1";
constexpr const char* kKinds[] = {"workloads", "resourceflavors", "workloadpriorityclasses"};

// The list `field` of a discovery document, empty unless the answer is one:
// a server answers a group or version it does not serve with a 404 whose
// body is the text "404 page not found" (no JSON: a null body here).
nlohmann::json ListIn(const Response& response, const char* field) {
  if (!response.ok() || !response.body.is_object()) return nlohmann::json::array();
  const auto it = response.body.find(field);
  return it != response.body.end() && it->is_array() ? *it : nlohmann::json::array();
}

}  // namespace

bool KueueApi::Discover() {
  const std::string group = std::string("/apis/") + kKueueGroup;
  Response response;
  if (Status s = client_->Get(group, &response); !s.ok()) return false;
  if (response.code != 200 && response.code != 404) return false;  // asked again later
  std::map<std::string, std::string> found;  // by plural: the newest version serving it
  const nlohmann::json versions = ListIn(response, "versions");
  for (const char* version : {"v1beta2", kOlder}) {
    bool listed = false;
    for (const auto& served : versions) {
      listed |= served.is_object() && served.value("version", "") == version;
    }
    if (!listed) continue;
    Response resources;
    if (Status s = client_->Get(group + "/" + version, &resources); !s.ok()) return false;
    if (resources.code == 404) continue;  // not served after all (a CRD changing meanwhile)
    if (!resources.ok()) return false;
    for (const auto& resource : ListIn(resources, "resources")) {
      // The newer version, met first, stays.
      if (resource.is_object()) found.emplace(resource.value("name", ""), version);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  discovered_ = true;
  for (const char* kind : kKinds) {
    auto served = found.find(kind);
    // Not installed: kept for when it is.
    if (served == found.end() || Of(kind).version == served->second) continue;
    KLOG_INFO << "Kueue serves its " << kind << " in " << kKueueGroup << "/" << served->second;
    versions_[kind] = served->second;
  }
  return true;
}

bool KueueApi::MayBeStale404() {
  const std::string asked_in = version();
  return !Discover() || version() != asked_in;
}

void KueueApi::EnsureDiscovered() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (discovered_) return;
  }
  Discover();
}

Resource KueueApi::Of(const char* plural) const {
  auto it = versions_.find(plural);
  return {kKueueGroup, it == versions_.end() ? kOlder : it->second, plural};
}

std::string KueueApi::version() const { return Workloads().version; }

std::string KueueApi::api_version() const { return std::string(kKueueGroup) + "/" + version(); }

Resource KueueApi::Workloads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Of("workloads");
}

Resource KueueApi::ResourceFlavors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Of("resourceflavors");
}

Resource KueueApi::WorkloadPriorityClasses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Of("workloadpriorityclasses");
}

}  // namespace kubeps::kube
