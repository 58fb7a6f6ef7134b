#include "operator/kube/kueue_api.h"

#include <nlohmann/json.hpp>

#include "common/logging.h"

namespace kubeps::kube {

bool KueueApi::Discover() {
  Response response;
  if (Status s = client_->Get(std::string("/apis/") + kKueueGroup, &response); !s.ok())
    return false;
  if (response.code != 200 && response.code != 404) return false;  // asked again later
  std::string served;
  if (response.ok()) {
    for (const auto& version : response.body.value("versions", nlohmann::json::array())) {
      const std::string name = version.value("version", "");
      if (name == "v1beta2" || (name == "v1beta1" && served.empty())) served = name;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  discovered_ = true;
  if (served.empty() || served == version_) return true;  // not installed: kept for when it is
  KLOG_INFO << "Kueue serves " << kKueueGroup << "/" << served << ": Workloads are made in it";
  version_ = served;
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

std::string KueueApi::version() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return version_;
}

std::string KueueApi::api_version() const { return std::string(kKueueGroup) + "/" + version(); }

Resource KueueApi::Workloads() const { return {kKueueGroup, version(), "workloads"}; }

Resource KueueApi::ResourceFlavors() const { return {kKueueGroup, version(), "resourceflavors"}; }

Resource KueueApi::WorkloadPriorityClasses() const {
  return {kKueueGroup, version(), "workloadpriorityclasses"};
}

}  // namespace kubeps::kube
