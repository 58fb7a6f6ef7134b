// The cluster interface: the little the job logic needs from whatever runs
// its replicas. Two implementations: local processes (operator/local) for
// `kubeps run`, and Kubernetes pods for kubeps-operator. The job logic
// (job_controller.h) is written once, against this.
//
// Not thread-safe: the job logic calls a Cluster from one thread, one
// reconcile at a time.
#ifndef KUBEPS_OPERATOR_CONTROLLER_CLUSTER_H_
#define KUBEPS_OPERATOR_CONTROLLER_CLUSTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubeps::controller {

enum class ReplicaRole { kScheduler, kServer, kWorker };
const char* ToString(ReplicaRole role);  // "scheduler", "server", "worker"

struct ReplicaName {
  ReplicaRole role;
  int index;
  // "scheduler-0", "server-1", "worker-0": also the node_id the replica
  // registers under, so a re-created replica gets its rank back.
  std::string ToString() const;
  bool operator<(const ReplicaName& o) const {
    return role != o.role ? role < o.role : index < o.index;
  }
  bool operator==(const ReplicaName& o) const { return role == o.role && index == o.index; }
};

enum class ReplicaPhase { kPending, kRunning, kSucceeded, kFailed };
const char* ToString(ReplicaPhase phase);

struct ReplicaStatus {
  ReplicaName name;
  ReplicaPhase phase = ReplicaPhase::kPending;
  int exit_code = 0;  // when Succeeded or Failed; 128+N for signal N
  int restarts = 0;   // times this replica was re-created
  // When Failed: what the replica said of its failure (its termination
  // message, "Reason: message"), split; both "" when it said nothing.
  std::string reason;
  std::string message;
  // When Pending: why it cannot start, in the backend's words, while that
  // is a state it does not leave on its own (Kubernetes: ErrImagePull,
  // ImagePullBackOff, InvalidImageName, CreateContainerConfigError,
  // Unschedulable, FailedMount); "" while it is merely starting. The local backend has
  // no such states.
  std::string start_problem;
  std::string start_problem_message;
  // What the backend calls this replica's current instance, for messages
  // (the pod's name); "" when it names none.
  std::string instance;
  // When the current instance was created, on the clock the job logic's
  // now_ms reads (-1: unknown): podStartTimeoutSeconds counts from it.
  int64_t created_ms = -1;
  // When Failed: its node ended it, not the replica itself (Kubernetes: a
  // graceful node shutdown, the kubelet preempting it for a critical pod),
  // as a drain's eviction would. It is made again without counting as a
  // restart, under any restart policy.
  bool disrupted = false;
  // When Failed: its node refused it before any of it ran (Kubernetes: the
  // kubelet's admission, as OutOfcpu or a GPU its device plugin could not
  // allocate): no verdict on the program, so it is made again under any
  // restart policy, after a back-off, each try counted against backoffLimit
  // unless `disrupted` as well (a node shutting down refused it).
  bool rejected = false;
  // When a node shutting down refused it: how many of the replica's pods in
  // a row were refused so, this one included. Not counted as restarts, they
  // double the back-off instead (a template's nodeName binds every new pod
  // to that node while it shuts down).
  int node_refusals = 0;
};

// Splits a termination message "Reason: message" (Reason a CamelCase word)
// into *reason and *message; of a text of another form (a log's tail, which
// FallbackToLogsOnError makes the message) the last line is the message.
void ParseTerminationMessage(const std::string& text, std::string* reason, std::string* message);

// The training program of a worker whose job brings its own
// (api::UserContainer): it runs in the replica's pod beside kubeps' own
// process, which then serves it as a sidecar (kubeps-agent --serve). The
// program is the pod's main process: the replica's outcome is its exit,
// the agent is restarted alone when it dies while the program runs, and
// stopped once the program has ended (Kubernetes' native sidecars).
struct UserProcess {
  std::string container;                   // the container's name, for logs
  std::vector<std::string> argv;           // the container's command, then its args
  std::map<std::string, std::string> env;  // what the process adds to the backend's environment
  std::string working_dir;                 // the container's workingDir, "" when it has none
  // Variables of the container's env given by valueFrom (secrets, the
  // downward API): only Kubernetes can resolve them.
  std::vector<std::string> cluster_only_env;
};

// What to run for one replica: the binary and its environment, and for a
// worker of a job that brings its own program, that program beside it.
struct ReplicaLaunch {
  ReplicaName name;
  std::string binary;  // "kubeps-server" or "kubeps-agent"
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::optional<UserProcess> user_process;
};

class Cluster {
 public:
  virtual ~Cluster() = default;
  // Starts the replica; if one of that name exists and has ended, it is
  // replaced and its restart count goes up. kUnavailable: a passing failure
  // (the backend could not be reached), tried again on the next pass; any
  // other error fails the job.
  virtual Status Create(const ReplicaLaunch& launch) = 0;
  // The grace period a backend gives its replicas when told none: the
  // local backend's own (5 s), on Kubernetes each pod's
  // terminationGracePeriodSeconds.
  static constexpr int kBackendGrace = -1;

  // Stops these replicas together and forgets them, as a deletion of many
  // pods does: each is told to stop (SIGTERM) at once, in the order given,
  // then all share one grace period of `grace_ms` (or kBackendGrace), after
  // which whatever is left is killed. Not one grace period after another: a
  // replica that takes its whole grace delays no other. Names it does not
  // run are skipped.
  virtual Status DeleteAll(const std::vector<ReplicaName>& names, int grace_ms) = 0;
  // One replica, with the backend's grace period.
  Status Delete(const ReplicaName& name) { return DeleteAll({name}, kBackendGrace); }
  // Every replica this backend runs for the job, with its current phase.
  virtual std::vector<ReplicaStatus> List() = 0;
  // host:port of the job's scheduler, or "" while it is not known yet.
  virtual std::string SchedulerAddress() = 0;
};

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_CLUSTER_H_
