// Leader election with a coordination.k8s.io/v1 Lease, as client-go does
// it: the holder renews the lease every renew interval; another replica
// takes it over only once it has not been renewed for the lease duration.
// Updates carry the lease's resourceVersion, so two candidates can never
// both win (the loser gets 409 Conflict).
//
// Not thread-safe: one thread campaigns and renews; others only read the
// stop flag it is given.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_
#define KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_

#include <atomic>
#include <string>

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
  LeaderElector(KubeClient* client, LeaseConfig config)
      : client_(client), config_(std::move(config)) {}

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
  KubeClient* client_;
  LeaseConfig config_;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_LEADER_ELECTION_H_
