#include "operator/kube/pod_expectations.h"

#include <set>

namespace kubeps::kube {

void PodExpectations::Created(const nlohmann::json& pod, Clock::time_point now) {
  pending_[pod["metadata"].value("name", "")] = Pending{pod, now};
}

std::vector<nlohmann::json> PodExpectations::Apply(std::vector<nlohmann::json> cached,
                                                   Clock::time_point now) {
  std::set<std::string> shown;
  for (const auto& pod : cached) shown.insert(pod["metadata"].value("name", ""));
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (shown.count(it->first) != 0 || now - it->second.created > kPatience) {
      it = pending_.erase(it);
      continue;
    }
    cached.push_back(it->second.pod);
    ++it;
  }
  return cached;
}

}  // namespace kubeps::kube
