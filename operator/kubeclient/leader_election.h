// Leader election with a coordination.k8s.io/v1 Lease, as client-go does
// it: the holder renews the lease every renew interval; another replica
// takes it over only once it has not been renewed for the lease duration.
// "Not renewed" is judged by the observer's own clock, from when it last saw
// the lease change, never by comparing the holder's renewTime with its own
// clock: two nodes' clocks may be minutes apart.
// Updates carry the lease's resourceVersion, so two candidates can never
// both win (the loser gets 409 Conflict).
//
// Not thread-safe: one thread campaigns and renews; others only read the
// stop flag it is given.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_
#define KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

struct LeaseConfig {
  std::string namespace_ = "kubeps-system";
  std::string name = "kubeps-operator";
  std::string identity;  // this replica, e.g. its pod name
  int lease_duration_s = 15;
  int renew_interval_ms = 5000;
  // A leader that could not renew for this long stops leading. Shorter than
  // the lease (client-go's RenewDeadline), so that it has stopped before a
  // standby may take the expired lease over.
  int renew_deadline_ms = 10000;
};

class LeaderElector {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `clock` is for tests; it must not go backwards.
  LeaderElector(
      KubeClient* client, LeaseConfig config,
      Clock clock = [] { return std::chrono::steady_clock::now(); })
      : client_(client), config_(std::move(config)), clock_(std::move(clock)) {}

  // One attempt to take or renew the lease; true while we hold it.
  bool TryAcquireOrRenew();
  // Blocks until this replica leads (true) or `stop` (false).
  bool AwaitLeadership(const std::atomic<bool>& stop);
  // Renews until `stop` or until the lease is lost (not renewed for
  // renew_deadline_ms); returns false if lost.
  bool KeepLeading(const std::atomic<bool>& stop);
  // Gives the lease up at shutdown, so a standby takes over at once.
  void Release();

 private:
  std::string Path() const;
  // Whether another holder's lease, as read now, has gone unchanged for its
  // duration by our clock.
  bool ExpiredByOurClock(const nlohmann::json& spec);

  KubeClient* client_;
  LeaseConfig config_;
  Clock clock_;
  nlohmann::json observed_spec_;                       // the other holder's lease as we last saw it
  std::chrono::steady_clock::time_point observed_at_;  // when it last changed
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_
