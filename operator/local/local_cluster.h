// The local backend of the cluster interface: every replica is a "pod" of
// child processes on this machine, on loopback. Children die with the
// runner (PR_SET_PDEATHSIG), so nothing outlives `kubeps run`.
//
// A pod is one process (the scheduler, a server, a worker training a
// built-in model), or, for a worker of a job that brings its own program,
// two, modelled on Kubernetes' native sidecars:
//   * the agent (the launch's binary, kubeps-agent --serve) starts first,
//     the user's program beside it; both get KUBEPS_SOCKET_DIR, a folder
//     of the run folder named after the replica and emptied for each new
//     pod (an emptyDir); where the run folder is too deep for a Unix
//     socket's path, these folders are in a short one of /tmp instead,
//     removed with the cluster;
//   * the pod's outcome is the program's: it stays Running until the
//     program has ended and the agent is gone; the agent is stopped
//     (SIGTERM, then SIGKILL after the grace period) once the program has
//     ended;
//   * an agent that dies while the program runs is restarted alone, at once
//     and then with a growing delay (restartPolicy Always); one that exits 0
//     is not: it does so once its program said finish, the worker is done;
//   * the program's output lines reach the runner's, tagged
//     "[worker-0/<container>]".
//
// Not thread-safe: the local runner drives it from its one thread.
#ifndef KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_
#define KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "operator/controller/cluster.h"

namespace kubeps::local {

class LocalCluster : public controller::Cluster {
 public:
  // `bin_dir` holds kubeps-server and kubeps-agent; `run_dir` is where the
  // children publish their ports, and holds the pods' shared folders.
  // `host` is the address every replica listens on (127.0.0.1 or ::1).
  LocalCluster(std::string bin_dir, std::string run_dir, int grace_ms = 5000,
               std::string host = "127.0.0.1");
  ~LocalCluster() override;

  Status Create(const controller::ReplicaLaunch& launch) override;
  // SIGTERM to every pod's main process at once, in the order given (an
  // agent beside a program once its program has ended, as the kubelet ends
  // native sidecars), then SIGKILL of whatever is left at the shared
  // deadline; returns once every process of these pods is reaped.
  Status DeleteAll(const std::vector<controller::ReplicaName>& names, int grace_ms) override;
  std::vector<controller::ReplicaStatus> List() override;
  std::string SchedulerAddress() override;

  // The gRPC and metrics ports a replica published, 0 while unknown.
  int GrpcPort(const controller::ReplicaName& name);
  int MetricsPort(const controller::ReplicaName& name);
  // Process id of a running replica's main process (the user's program
  // where the pod has one), or -1; for tests that kill one.
  pid_t Pid(const controller::ReplicaName& name) const;
  // The agent serving a user's program, or -1.
  pid_t AgentPid(const controller::ReplicaName& name) const;
  // Times the agent of the replica's current pod was restarted alone.
  int AgentRestarts(const controller::ReplicaName& name) const;
  // The folder the pods of `name` share with their agent.
  std::string SocketDir(const controller::ReplicaName& name) const;

 private:
  struct Pod {
    controller::ReplicaStatus status;
    controller::ReplicaLaunch launch;  // kept: a dead agent is started again from it
    pid_t pid = -1;                    // kubeps' process: the agent, where there is a program
    pid_t program_pid = -1;            // the user's program, -1 when none or ended
    bool has_program = false;
    int program_exit_code = -1;     // -1 while the program runs (or the pod has none)
    bool termination_read = false;  // the ended life's termination message was read
    int agent_restarts = 0;
    int64_t agent_start_at_ms = -1;  // a dead agent's restart is due then
    int64_t agent_term_at_ms = -1;   // the agent is sent SIGTERM then, its program ended
    int64_t agent_kill_at_ms = -1;   // and SIGKILL then
    int grpc_port = 0;               // kept across restarts: peers know this address
    int metrics_port = 0;
  };
  void Reap(Pod& pod);
  // A pod with a program: the agent's restarts and its end.
  void ReapSidecarPod(Pod& pod);
  Status StartAgent(Pod& pod);
  Status StartProgram(Pod& pod);
  // Stops the pods together (DeleteAll's contract).
  static void StopPods(std::vector<Pod*> pods, int grace_ms);
  void ReadPorts(const controller::ReplicaName& name, Pod& pod);

  const std::string bin_dir_;
  const std::string run_dir_;
  // Where the pods' shared folders are: run_dir_, or a short folder of
  // /tmp made for them (and removed) where run_dir_ is too deep.
  const std::string socket_root_;
  const int grace_ms_;
  const std::string host_;
  std::map<controller::ReplicaName, Pod> pods_;
};

}  // namespace kubeps::local

#endif  // KUBEPS_OPERATOR_LOCAL_LOCAL_CLUSTER_H_
