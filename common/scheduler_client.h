// The one client of the scheduler protocol, as ps-lite's Postoffice: what
// every node (parameter-server shard or worker) does with its job's
// scheduler. Register once (waiting for a scheduler that is not up yet), then
// long-poll the cluster view, heartbeat (which also carries the recovery
// generations), meet at barriers and say when the worker is done.
//
//   SchedulerClient scheduler(options);
//   int rank;  scheduler.Register(&rank);
//   ClusterInfo cluster;  scheduler.AwaitClusterView(&cluster);
//   every beat: scheduler.Heartbeat(restored_generation, &beat);
//
// Every call resends on timeout (common/resend.h) with the same identity,
// except Heartbeat: a lost beat is replaced by the next. Thread-safe: one
// thread may heartbeat while another waits at a barrier.
#ifndef KUBEPS_COMMON_SCHEDULER_CLIENT_H_
#define KUBEPS_COMMON_SCHEDULER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/job_token.h"
#include "common/resend_policy.h"
#include "common/status.h"
#include "common/transport_security.h"
#include "kubeps.pb.h"

namespace kubeps {

class MetricsServer;
class ResendCaller;
class StopToken;

enum class NodeRole { kServer, kWorker };

// What a server tells the scheduler of itself when it registers and with
// every beat.
struct ShardReport {
  std::vector<uint64_t> checkpoint_steps;  // every step it holds a checkpoint of
  // Async: each worker's step as far as the shard knows it (NodeInfo.async_worker_steps).
  std::optional<v1::AsyncWorkerSteps> async_worker_steps;
  // An elastic job's examples of a step, as its pushes or checkpoints said
  // (NodeInfo.checkpoint_global_batch; in registrations only).
  uint32_t global_batch = 0;
  // The spec.batchSize of the job whose global batch that is
  // (NodeInfo.checkpoint_batch_size; in registrations only).
  uint32_t batch_size = 0;
  uint32_t checkpoint_workers = 0;  // NodeInfo.checkpoint_worker_count; in registrations only
};

struct SchedulerClientOptions {
  std::string scheduler_address;
  std::string node_id;  // stable identity: a restart keeps the rank
  NodeRole role = NodeRole::kWorker;
  std::shared_ptr<JobToken> token;                    // null: no token
  std::shared_ptr<const TransportSecurity> security;  // null: plain TCP
  std::string address;  // servers: host:port where workers reach the shard
  std::string metrics_address;
  int64_t checkpoint_step = -1;  // servers: the checkpoint loaded at start, -1 = none
  ShardReport shard_at_start;    // servers: as they start
  // Servers: whether the shard still waits for the recovery its restart
  // calls for (NodeInfo.awaits_recovery), asked when registering again.
  std::function<bool()> awaits_recovery;
  ResendPolicy resend;
  int long_poll_ms = 500;            // server-side wait of one cluster-view or barrier poll
  int peer_wait_limit_ms = 600000;   // give up waiting for the scheduler or slow peers after this
  MetricsServer* metrics = nullptr;  // null: not exported
  // When given (it outlives the client), its stop ends every call at once,
  // a Register still waiting for the scheduler included: kAborted.
  StopToken* stop = nullptr;
};

// The job as the scheduler sees it once every node has registered.
struct ClusterInfo {
  int num_workers = 0;
  std::vector<std::string> server_addresses;  // by rank
};

// One heartbeat's answer.
struct HeartbeatAnswer {
  uint64_t generation = 0;              // bumps at every recovery
  uint64_t restore_step = 0;            // the step the current generation resumes from
  bool keep_state = false;              // servers: enter the generation, restore nothing
  bool generation_ready = true;         // every shard has restored it
  bool shutdown = false;                // every worker finished: the job is over
  int64_t common_checkpoint_step = -1;  // the newest step every shard holds, -1 = none known
  std::string failure;                  // non-empty: the job cannot go on, and why
  std::string failure_reason;           // the termination reason it calls for, if any
  // A newer process of this node registered: this one stops, touching nothing.
  bool replaced = false;
  // Non-empty: a restarted scheduler refused this node's registration (the
  // rank it had taken since by a new process), and why. It stops; its
  // restart registers anew.
  std::string refused;
  // The nodes silent past the scheduler's dead_after_ms.
  std::vector<std::string> dead_nodes;
  // Servers: every registered worker's current incarnation, by node id.
  std::map<std::string, uint64_t> worker_incarnations;
  // Workers of an elastic job: who computes which step (common/membership.h);
  // no changes for a job whose workers are fixed.
  v1::Membership membership;
  // Async workers: the step this one goes on from (HeartbeatResponse.own_step);
  // unset while some shard cannot tell.
  std::optional<uint64_t> own_step;
};

class SchedulerClient {
 public:
  explicit SchedulerClient(SchedulerClientOptions options);
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // Drawn at random for every process, never from a clock (a clock set
  // behind would make a new life look older than the one it replaces): the
  // scheduler's view, not the numbers' order, says which life is current.
  uint64_t incarnation() const { return incarnation_; }
  const std::string& peer() const { return peer_; }  // "scheduler <address>", for messages

  // Registers and remembers the rank. Heartbeat and Finish register again,
  // on their own, with a scheduler that restarted and forgot this node.
  Status Register(int* rank);
  Status AwaitClusterView(ClusterInfo* cluster);
  // One beat, one attempt. Servers report the generation they restored and
  // what ShardReport holds.
  Status Heartbeat(uint64_t restored_generation, HeartbeatAnswer* answer,
                   const ShardReport* shard = nullptr);
  // Waits until every worker reached barrier `name`, or until `stopped`
  // (asked between long polls) says why it never will: the job stopped.
  Status Barrier(
      const std::string& name, int rank,
      const std::function<Status()>& stopped = [] { return Status::Ok(); });
  // `steps_done`: the step after the last one this worker pushed.
  Status Finish(int rank, uint64_t steps_done = 0);
  // Workers: the step they are about to compute, sent with every beat (an
  // elastic job's scheduler extends its membership lease from it).
  void ReportStep(uint64_t step) { step_ = step; }
  // The step said last: ReportStep's, or before it, where this process
  // replaced another of its node in an async job, the step that one said
  // last (RegisterResponse.resume_step).
  uint64_t reported_step() const { return step_; }
  // Servers: a heartbeat answered that the job is over; every beat from now
  // on says this server heard it (the scheduler waits for that word).
  void SayJobOverHeard() { heard_job_over_ = true; }
  // Workers: every beat from now on says that their program cannot start
  // where the job is (HeartbeatRequest.program_state_missing); nullopt
  // stops saying it.
  void SayProgramStateMissing(std::optional<v1::ProgramStateMissing> missing);

 private:
  struct Stub;
  // One attempt to register with a restarted scheduler, carrying the
  // recovery generation this node last heard of and (servers) the steps it
  // holds now, not at start: a recovery right after the restart needs them.
  // `seen` is registrations_ before the call that found the scheduler
  // restarted: when another thread of this node (a worker beats from two)
  // registered since, this one does not again.
  Status RegisterAgain(uint64_t seen, const ShardReport* shard);
  Status SameRank(int rank) const;
  uint64_t Registrations();
  v1::NodeInfo Node() const;

  const SchedulerClientOptions options_;
  // What the last heartbeat answered: told to a restarted scheduler.
  std::atomic<uint64_t> generation_{0}, restore_step_{0};
  std::atomic<uint64_t> step_{0};
  std::atomic<bool> heard_job_over_{false};
  std::mutex membership_mutex_;
  v1::Membership membership_;          // the newest heard of, told to a restarted scheduler
  std::vector<int> finished_workers_;  // the ranks heard of as finished, told to it too
  int rank_ = -1;                      // the first registration's
  std::string refused_;                // a restarted scheduler's refusal, said by every beat after
                                       // (register_again_mutex_)
  std::mutex beat_mutex_;              // what every heartbeat says:
  std::vector<std::string> passed_barriers_;
  std::optional<v1::ProgramStateMissing> program_state_missing_;
  const uint64_t incarnation_;
  const std::string peer_;
  MetricsServer* metrics_;
  std::unique_ptr<ResendCaller> caller_;
  std::unique_ptr<Stub> stub_;
  // What the newest registration answered; Finish proves with it that this
  // process is the node it names.
  std::mutex key_mutex_;
  std::string registration_key_;
  std::mutex register_again_mutex_;
  uint64_t registrations_ = 0;  // with restarted schedulers, under register_again_mutex_
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_SCHEDULER_CLIENT_H_
