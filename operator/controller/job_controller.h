// The job logic, written once for every backend: which replicas a
// TrainingJob needs, what a failure means, when the job is done.
//
// Reconcile() is level-triggered and idempotent: it looks at what the
// cluster runs now, compares it with what the job needs, acts on the
// difference and returns the job's status. Calling it again with nothing
// changed does nothing.
//
// Not thread-safe: one JobController per job, driven by one reconcile at a
// time.
#ifndef KUBEPS_OPERATOR_CONTROLLER_JOB_CONTROLLER_H_
#define KUBEPS_OPERATOR_CONTROLLER_JOB_CONTROLLER_H_

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/training_job.h"
#include "api/training_job_status.h"
#include "operator/controller/cluster.h"

namespace kubeps::controller {

using api::JobPhase;
using api::ToString;

struct RoleCounts {
  int active = 0;   // pending or running
  int running = 0;  // of those, running
  int succeeded = 0;
  int failed = 0;
};

struct JobStatus {
  JobPhase phase = JobPhase::kCreated;
  std::string reason;   // CamelCase, e.g. "WorkerFailed"
  std::string message;  // one sentence for `kubectl describe` / the runner
  RoleCounts scheduler, servers, workers;
  int restarts = 0;                             // all replicas together, for backoffLimit
  std::map<std::string, int> replica_restarts;  // "worker-1" -> its restarts; none: 0
  bool finished() const { return api::IsFinished(phase); }
};

// Builds the launch description (binary, env) of one replica; the backend
// knows addresses, ports and paths, the controller does not.
using LaunchBuilder =
    std::function<ReplicaLaunch(const ReplicaName& name, const std::string& scheduler_address)>;

class JobController {
 public:
  // Servers and the scheduler get this long to exit on their own once the
  // workers are done, before they are deleted. They exit within a second:
  // the scheduler tells the servers at their next heartbeat, then goes. The
  // linger is for a server that restarts at that moment; it lasts only
  // while the scheduler and a server are both there to talk.
  static constexpr int kLingerMs = 10000;
  // Once the servers are gone, the scheduler has only this long left: it
  // waits a while for servers that died before hearing the job was over.
  static constexpr int kSchedulerLingerMs = 1000;

  JobController(api::TrainingJob job, Cluster* cluster, LaunchBuilder build_launch);

  // One reconcile pass; `now_ms` is a monotonic clock reading.
  JobStatus Reconcile(int64_t now_ms);

  // Deletes every replica (the user asked to stop, or suspended the job),
  // all at once: workers first, so that none trains on against servers
  // that are going, then the servers, then the scheduler. `grace_ms`: how
  // long they have together to exit before they are killed.
  void DeleteAll(int grace_ms = Cluster::kBackendGrace);

  // When the job started (monotonic ms), for activeDeadlineSeconds; the
  // first Reconcile sets it when nobody did.
  void set_start_ms(int64_t start_ms) { start_ms_ = start_ms; }
  // The times a controller made anew for each reconcile carries over from
  // the one before.
  struct Timers {
    // When every worker had finished (-1: not yet): the servers' linger.
    int64_t workers_done_ms = -1;
    // Since when each worker past the desired number has been there.
    std::map<ReplicaName, int64_t> surplus_since_ms;
    // From when an elastic job that has run needed each worker pod that
    // could not be scheduled (it trained on without it while it kept its
    // minReplicas; where an operator restart lost that, from the first pass
    // that saw it needed).
    std::map<ReplicaName, int64_t> needed_since_ms;
    // When podStartTimeoutSeconds starts for `name`'s pod made at
    // `created_ms` (-1: unknown): its creation, or when it was needed.
    int64_t StartClock(const ReplicaName& name, int64_t created_ms) const {
      auto needed = needed_since_ms.find(name);
      if (created_ms < 0 || needed == needed_since_ms.end()) return created_ms;
      return std::max(created_ms, needed->second);
    }
  };
  const Timers& timers() const { return timers_; }
  void set_timers(Timers timers) { timers_ = std::move(timers); }
  // Each replica's restarts as recorded earlier (the job's status): a pod
  // deleted from outside takes its count with it, the record does not.
  void set_known_restarts(std::map<std::string, int> known) { known_restarts_ = std::move(known); }

  // Every replica the job needs, scheduler first.
  std::vector<ReplicaName> DesiredReplicas() const;

  // Elastic jobs: how many workers the job should have now (kubeps scale;
  // on Kubernetes the spec's, which kubectl scale sets). Workers past it are
  // left to leave on their own (the scheduler takes them out at a step
  // boundary, and they exit with ScaledAway), and are deleted once they
  // have; one still there kSurplusGraceMs later is stopped. A worker that
  // left is started again (a new pod) when the number grows back.
  static constexpr int kSurplusGraceMs = 30000;
  // A replica its node rejected before it ran is made again this long after
  // its pod was made, doubled for each time it was made again before.
  static constexpr int64_t kRejectionBackoffMs = 10000;
  static constexpr int64_t kMaxRejectionBackoffMs = 360000;
  void SetDesiredWorkers(int workers) { desired_workers_ = workers; }
  // The ranks that compute the job's newest step, as its scheduler says
  // them (a local run's folder; on Kubernetes its metrics): a worker past
  // the desired number is surplus only once it is not one of them, as it
  // may compute until a change step minutes away. Never said: at once.
  void SetComputingWorkers(const std::vector<int>& ranks) {
    computing_workers_ = std::set<int>(ranks.begin(), ranks.end());
  }
  // Whether the job has run (its status says so: TrainingJobStatus::HasRun),
  // for a controller made anew for each reconcile.
  void set_has_run(bool has_run) { has_run_ = has_run; }
  int desired_workers() const { return desired_workers_; }
  // The order in which replicas are stopped: workers, servers, scheduler.
  static void SortForStopping(std::vector<ReplicaName>* names);

 private:
  JobStatus Observe(const std::vector<ReplicaStatus>& replicas) const;
  // A server or the scheduler that exited 0 without being told the job is
  // over: a failure, like any other exit of theirs.
  static bool EndedBeforeTheWorkers(const ReplicaStatus& replica);
  static bool SchedulerSawTheJobOver(const std::map<ReplicaName, ReplicaStatus>& observed);
  JobStatus WaitForWorkersAfterJobOver(JobStatus status,
                                       const std::map<ReplicaName, ReplicaStatus>& observed,
                                       int64_t now_ms);
  // Every worker has succeeded: waits for the servers and the scheduler to
  // exit on their own, or stops them; done when the job has succeeded.
  JobStatus FinishJob(JobStatus status, const std::map<ReplicaName, ReplicaStatus>& observed,
                      int64_t now_ms);
  // JobRunning's message: every replica runs, or which does not and why.
  std::string RunningMessage(const std::map<ReplicaName, ReplicaStatus>& observed) const;
  // What the job does about a replica that cannot start, for its message.
  std::string StartTimeoutNote() const;
  // At the end of the job: deletes replicas as cleanPodPolicy says.
  void Cleanup();
  // Deletes these replicas together, in stopping order; logs a failure (the
  // next pass deletes again what stays).
  void DeleteOrLog(std::vector<ReplicaName> names, int grace_ms);
  JobStatus Fail(const std::string& code, const std::string& message, int64_t now_ms);

  const api::TrainingJob job_;
  Cluster* const cluster_;
  const LaunchBuilder build_launch_;
  std::string failure_;  // set once the job has failed for good
  std::string failure_code_;
  bool succeeded_ = false;  // set once every worker succeeded
  // The replicas' counts when the job ended, before cleanPodPolicy deleted
  // any: what a finished job's status keeps reporting.
  std::optional<JobStatus> final_counts_;
  Timers timers_;
  int64_t start_ms_ = -1;
  std::map<std::string, int> known_restarts_;
  std::optional<std::set<int>> computing_workers_;  // SetComputingWorkers
  int desired_workers_;
  // The job has been Running (a restart since counts): one whose pod is
  // made again later trains on meanwhile.
  bool has_run_ = false;
  // Stops workers past the desired number that did not leave in time.
  void StopSurplusWorkers(const std::map<ReplicaName, ReplicaStatus>& observed, int64_t now_ms);
};

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_JOB_CONTROLLER_H_
