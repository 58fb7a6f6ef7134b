// What this operator just created that its pod cache may not show yet. A
// create's answer arrives before the watch event that puts the pod in the
// cache (by a fraction of a second, or seconds on a loaded API server), and
// a reconcile in between would see the replica missing and create it again:
// a 409, a GET to learn whose pod holds the name, and with no harm done only
// because the name is fixed. controller-runtime projects keep these
// "expectations" for the same reason; here the pods themselves are kept, so
// the job logic sees them exactly as created.
//
// Thread-compatible: one per job, used by the reconcile worker only.
#ifndef KUBEPS_OPERATOR_KUBE_POD_EXPECTATIONS_H_
#define KUBEPS_OPERATOR_KUBE_POD_EXPECTATIONS_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubeps::kube {

class PodExpectations {
 public:
  using Clock = std::chrono::steady_clock;
  // A pod the cache has not shown within `patience` is no longer assumed:
  // it may have been deleted before its watch event (the cache then never
  // shows it), and the next reconcile sees the truth again.
  static constexpr std::chrono::seconds kPatience{30};

  // `pod` as the API server answered its create.
  void Created(const nlohmann::json& pod, Clock::time_point now);
  // A pod deleted here is expected no more.
  void Deleted(const std::string& name) { pending_.erase(name); }
  // The cache's pods, with every pod created here that the cache does not
  // show yet. A pod of that name in the cache, whoever's it is, ends the
  // expectation: from then on the cache is the truth.
  std::vector<nlohmann::json> Apply(std::vector<nlohmann::json> cached, Clock::time_point now);
  size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    nlohmann::json pod;
    Clock::time_point created;
  };
  std::map<std::string, Pending> pending_;  // by pod name
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_POD_EXPECTATIONS_H_
