// The job's scheduler: rendezvous and liveness.
//  - Register: a node gets a rank within its role. Ranks are stable: the
//    same node_id registering again (a restarted pod) gets its rank back.
//  - GetClusterView: long-polls until every expected server and worker has
//    registered, then returns the servers' addresses in rank order, from
//    which every worker computes the same key placement.
//  - Barrier: releases when every worker has arrived; a worker arriving at a
//    barrier that was already released passes at once (a restarted worker
//    replaying its steps).
//  - Heartbeat: reports nodes silent for longer than dead_after_ms, and
//    tells everyone to shut down once every worker has finished.
//  - Recovery (sync jobs): when a shard re-registers after a restart, having
//    loaded its checkpoint of step S, the scheduler opens a new generation
//    with restore step S. Every shard restores its checkpoint of S and says
//    so in its heartbeats; once all have, the generation is ready and the
//    workers, which learn of it from their heartbeats, resume from step S.
//    The job ends up exactly where a run without the crash would have.
//    The step is the newest one every shard holds a checkpoint of (shards
//    report their steps in their heartbeats), not the restarted shard's own
//    newest: one shard's checkpoints may lag. None in common fails the job.
//    Where the workers keep the parameters (the servers' optimizer none), a
//    worker's new process opens one too, at the newest common step, whose
//    state its program saved (kubeps.torch.resume_with): unless a rollback
//    is being restored (it joins that one), another worker has finished
//    (nobody could redo its steps), or no step is in common. A worker that
//    finishes in a generation before the current one fails the job.
//  - First start over old checkpoints (a job run again with the same
//    checkpoint folder): once every node has registered for the first time,
//    the scheduler opens generation 1 at the newest step every shard holds,
//    and the workers resume there. (With spec.checkpoint.resume false, each
//    server has deleted another run's checkpoints before registering:
//    CheckpointStore::ClaimForRun.) This happens once, when `started_` turns
//    true: a node registering again later (a restart) never re-opens it, and
//    a scheduler that learns the job back from nodes registering again
//    (NodeInfo.registered_before) never runs it at all.
//  - A scheduler restarted mid-job decides what its servers' restarts call
//    for once every node has registered, whatever their order, and brings
//    no server into a generation before: a recovery where a server's process
//    is new, or still awaits the recovery its restart called for, which the
//    scheduler before may have died with (NodeInfo.awaits_recovery), or a
//    worker's process is new where the workers keep the parameters; in an
//    async job, that a new server process keep what it loaded.
//  - Elastic jobs: which workers compute which step (elastic_workers.h).
//    Heartbeats carry the schedule to the workers; the desired number comes
//    from SetDesiredWorkers (kubeps scale, kubectl scale).
#ifndef KUBEPS_PS_SERVER_SCHEDULER_H_
#define KUBEPS_PS_SERVER_SCHEDULER_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fault_injector.h"
#include "common/job_token.h"
#include "common/long_poll.h"
#include "common/metrics.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/elastic_workers.h"

namespace kubeps {

struct SchedulerOptions {
  int num_servers = 1;
  int num_workers = 1;     // an elastic job's workers at its start
  int batch_size = 0;      // each worker's (spec.batchSize); 0 = not known
  ElasticOptions elastic;  // elastic.elastic false: the workers are fixed
  int dead_after_ms = 5000;
  // A node registering under a known name with a new incarnation replaces
  // the registered one only once that has been silent this long (workers
  // beat every 500 ms, servers every 250 ms): a live node is never replaced
  // by a second process claiming its name.
  int replace_silent_after_ms = 1500;
  bool sync = true;  // sync jobs roll back every node when a shard restarts
  // The servers' optimizer is none: they only average, and each worker's
  // program keeps the parameters and its optimizer's state. A sync job then
  // rolls back every node when a worker restarts as well, to a step its
  // program kept its state of (a checkpoint step).
  bool workers_keep_parameters = false;
  std::string checkpoint_dir;       // for messages: where the shards' checkpoint folders are
  std::shared_ptr<JobToken> token;  // checked by SchedulerService; null: no token
  FaultInjector* faults = nullptr;  // KUBEPS_FAULTS, injected by SchedulerService; null = none
};

// The scheduler's logic, apart from its gRPC service (scheduler_service.h),
// as Shard is apart from ParameterServerService. Thread-safe: every method
// may be called from any thread; the long polls (GetClusterView, Barrier)
// block the calling thread for at most the request's wait_ms.
// The newest step present in every list (each list: the steps one shard
// holds), or -1 when there is none or `steps` is empty.
int64_t NewestCommonStep(const std::vector<std::vector<uint64_t>>& steps);

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, MetricsServer* metrics);

  grpc::Status Register(const v1::RegisterRequest* request, v1::RegisterResponse* response);
  // The long polls end early, with CANCELLED, once `cancelled` (may be
  // empty) turns true, and with UNAVAILABLE once Stop() is called.
  grpc::Status GetClusterView(const v1::ClusterViewRequest* request, v1::ClusterView* response,
                              const std::function<bool()>& cancelled = {});
  grpc::Status Barrier(const v1::BarrierRequest* request, v1::BarrierResponse* response,
                       const std::function<bool()>& cancelled = {});
  grpc::Status Heartbeat(const v1::HeartbeatRequest* request, v1::HeartbeatResponse* response);
  grpc::Status Finish(const v1::FinishRequest* request, v1::FinishResponse* response);

  // True once every worker has called Finish.
  bool AllWorkersFinished() const;
  // Blocks until AllWorkersFinished() or the timeout passes.
  bool WaitAllWorkersFinished(std::chrono::milliseconds timeout) const;
  // Blocks until every server has been told to shut down (in a heartbeat
  // answer) or the timeout passes.
  bool WaitServersToldToStop(std::chrono::milliseconds timeout) const;
  // Non-empty once the job cannot go on (no checkpoint step in common).
  std::string Failure() const;
  // The termination reason Failure() calls for, "" where none of its own.
  std::string FailureReason() const;
  // Elastic jobs: how many workers the job should have, from `at_step`
  // exactly where given; "" or why not.
  std::string SetDesiredWorkers(int workers, std::optional<uint64_t> at_step = std::nullopt);
  // Elastic jobs: the ranks that compute the newest step a worker reported.
  std::vector<int> ComputingWorkers() const;
  // Ends every waiting long poll now, so that the gRPC server's Shutdown
  // need not wait out their wait_ms.
  void Stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Member {
    v1::NodeInfo info;
    Clock::time_point last_seen;
    std::string registration_key;  // given to the process that registered
    // An async job's server whose process started after the job did: it
    // keeps what it loaded (HeartbeatResponse.keep_state).
    bool keeps_state = false;
    // Async workers: the largest step this node's processes said in their
    // beats (RegisterResponse.resume_step).
    uint64_t reported_step = 0;
  };
  // Async: the step `worker` goes on from (HeartbeatResponse.own_step), or
  // nullopt while some shard cannot tell or has not registered (requires mutex_).
  std::optional<uint64_t> OwnStep(const Member& worker) const;
  bool ViewReady() const;  // requires mutex_
  // Every shard has restored the current generation (generation 0 has none).
  bool GenerationReady() const;                                           // requires mutex_
  grpc::Status LongPollOutcome(const char* call, LongPollEnd end) const;  // requires mutex_
  void StartRecovery(const v1::NodeInfo& server);                         // requires mutex_
  // A worker restarted in a job whose workers keep the parameters: the job
  // goes back to the newest step every shard holds (requires mutex_).
  void RollBackForRestartedWorker(const v1::NodeInfo& worker);
  // A worker's program cannot start where the job is (it holds no state of
  // that step): the job goes back to the newest step every shard and the
  // program hold, or fails saying why (requires mutex_).
  void RollBackToHeldState(const std::string& worker, const v1::ProgramStateMissing& missing);
  // A new recovery generation: every shard restores `step`, every worker
  // resumes there.
  void OpenGeneration(uint64_t step);  // requires mutex_
  void FirstStart();                   // requires mutex_
  void SayAnotherGlobalBatch() const;  // requires mutex_
  std::string EpochCost() const;       // requires mutex_
  // Whether checkpoints written by workers of batch `written` (0: not
  // said) are of another spec.batchSize than this job's.
  bool OtherBatchSize(uint32_t written) const;
  // A field of the servers' registrations about their checkpoints' job:
  // the first server's that is not 0, or 0 (requires mutex_).
  uint32_t ServersSay(uint32_t (v1::NodeInfo::*field)() const) const;
  // Before the elastic schedule starts with `workers` (requires mutex_).
  void KeepCheckpointsGlobalBatch(size_t workers);
  void ServersRestartedWithTheScheduler();  // requires mutex_
  // Every server's checkpoint steps, by rank (requires mutex_).
  std::vector<std::vector<uint64_t>> ServerSteps() const;
  std::string DescribeSteps() const;           // requires mutex_
  std::vector<std::string> DeadNodes() const;  // requires mutex_
  // Says each node newly among `dead` once, and once it is heard again
  // (requires mutex_).
  void SaySilentNodes(const std::vector<std::string>& dead);
  // Every worker slot's rank: an elastic job's maxReplicas (requires nothing).
  int WorkerSlots() const;
  // Every member of the newest membership has finished (requires mutex_).
  bool MembersFinished() const;
  void AdoptFinishedWorkers(const v1::NodeInfo& node);  // requires mutex_
  // Releases barrier `name` if every worker arrived; true if it did.
  bool ReleaseIfComplete(const std::string& name);
  // Elastic jobs, at every heartbeat (requires mutex_): drops members
  // silent for replace_timeout through a recovery, and plans the changes
  // the desired number asks for.
  void ReviseMembership();
  void DropLostWorkers();             // requires mutex_
  std::set<int> GoneWorkers() const;  // ranks with no worker to compute them; requires mutex_
  // Registered and not departed, ascending; `beating`: heard from within
  // dead_after_ms too (requires mutex_).
  std::vector<int> RegisteredWorkers(bool beating = true) const;

  const SchedulerOptions options_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;                             // Stop() was called
  std::map<std::string, Member> members_;             // by node_id
  std::vector<std::string> server_ids_, worker_ids_;  // index = rank; "" = free
  std::map<std::string, std::set<int>> barriers_;
  std::set<std::string> released_barriers_;
  std::set<int> finished_workers_;
  uint64_t finished_steps_ = 0;                           // the furthest FinishRequest.steps_done
  std::map<std::string, Clock::time_point> said_silent_;  // SaySilentNodes: heard last
  Clock::time_point started_at_;
  std::set<std::string> departed_;  // workers that left an elastic job, scaled away
  ElasticWorkers elastic_;
  std::set<std::string> told_to_stop_;  // servers that got shutdown = true
  uint64_t generation_ = 0;
  uint64_t restore_step_ = 0;
  std::set<std::string> restored_;  // servers that restored generation_
  bool started_ = false;            // every node registered once
  bool restarted_ = false;          // a node registered again: this scheduler restarted mid-job
  std::map<std::string, std::vector<uint64_t>> checkpoint_steps_;  // servers', newest report
  int64_t common_step_ = -1;
  std::string failure_;
  std::string failure_reason_;  // where failure_ calls for one (HeartbeatResponse)
  uint64_t epoch_ = 0;
  prometheus::Gauge& registered_;
  prometheus::Gauge& workers_;            // kubeps_job_workers: the newest membership's
  prometheus::Gauge& common_checkpoint_;  // common_step_ as the last heartbeat answered it
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_SCHEDULER_H_
