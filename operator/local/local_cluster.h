// The local backend of the cluster interface: every replica is a child
// process on this machine, on loopback. Children die with the runner
// (PR_SET_PDEATHSIG), so nothing outlives `kubeps run`.
//
// Not thread-safe: the local runner drives it from its one thread.
#ifndef KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_
#define KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <map>
#include <string>

#include "operator/controller/cluster.h"

namespace kubeps::local {

class LocalCluster : public controller::Cluster {
 public:
  // `bin_dir` holds kubeps-server and kubeps-agent; `run_dir` is where the
  // children publish their ports.
  LocalCluster(std::string bin_dir, std::string run_dir, int grace_ms = 5000);
  ~LocalCluster() override;

  Status Create(const controller::ReplicaLaunch& launch) override;
  Status Delete(const controller::ReplicaName& name) override;
  std::vector<controller::ReplicaStatus> List() override;
  std::string SchedulerAddress() override;

  // The gRPC and metrics ports a replica published, 0 while unknown.
  int GrpcPort(const controller::ReplicaName& name);
  int MetricsPort(const controller::ReplicaName& name);
  // Process id of a running replica (for tests that kill one), or -1.
  pid_t Pid(const controller::ReplicaName& name) const;

 private:
  struct Process {
    controller::ReplicaStatus status;
    pid_t pid = -1;
    int grpc_port = 0;  // kept across restarts: peers know this address
    int metrics_port = 0;
  };
  void Reap(Process& process);
  void ReadPorts(const controller::ReplicaName& name, Process& process);

  const std::string bin_dir_;
  const std::string run_dir_;
  const int grace_ms_;
  std::map<controller::ReplicaName, Process> processes_;
};

}  // namespace kubeps::local

#endif  // KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_
