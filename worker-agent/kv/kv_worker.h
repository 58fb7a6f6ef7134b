// The worker's key-value client: the whole API a trainer needs to train
// against kubeps' parameter servers, in the spirit of ps-lite's KVWorker.
//
//   auto kv = KVWorker::Start(options);        // register, get rank, find shards
//   kv->InitTensors(initial, sizes);           // rank 0's values win; all wait
//   for (step...) {
//     kv->Wait(kv->Pull(params, step));        // parameters of version `step`
//     ... compute gradients ...
//     kv->Wait(kv->Push(grads, step));
//   }
//   kv->Finish();
//
// Keys are tensor indices. Push and Pull take one pointer per key; a null
// pointer leaves that key out. They return at once with a ticket; Wait
// blocks until every request of the ticket is answered (after resends) and
// returns the first failure, which names the shard and the RPC.
//
// This is the seam for running the agent as a sidecar: a user's framework
// reaches the same calls over a local socket instead of linking them.
#ifndef KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
#define KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "common/resend.h"
#include "common/status.h"
#include "kubeps.grpc.pb.h"
#include "worker-agent/kv/placement.h"
#include "worker-agent/kv/task_pool.h"

namespace kubeps {

struct KVOptions {
  std::string scheduler_address;
  std::string node_id;          // stable identity: a restart keeps the rank
  std::string token;
  std::string metrics_address;  // reported to the scheduler
  ResendPolicy resend;
  PlacementOptions placement;
  int pull_wait_ms = 500;             // server-side long-poll slice
  int peer_wait_limit_ms = 600000;    // give up waiting for slow peers after this
  int heartbeat_interval_ms = 500;
  MetricsServer* metrics = nullptr;   // null: metrics are not exported
};

class KVWorker {
 public:
  using Ticket = uint64_t;

  static Status Start(const KVOptions& options, std::unique_ptr<KVWorker>* out);
  ~KVWorker();

  int rank() const { return rank_; }
  int size() const { return num_workers_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }

  // Declares the tensors (sizes in elements, key = index) and sets their
  // initial values: rank 0's `values` are stored, the others' ignored (the
  // broadcast of initial weights). Returns when every worker has declared.
  Status InitTensors(const std::vector<const float*>& values, const std::vector<uint64_t>& sizes);

  // Gradients computed on parameters of version `step` (sync mode).
  Ticket Push(const std::vector<const float*>& grads, uint64_t step);
  // Parameters of at least version `min_version` (0 in async mode).
  Ticket Pull(const std::vector<float*>& values, uint64_t min_version);
  // Push, then pull version step+1 once the push is acknowledged.
  Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                  uint64_t step);
  Status Wait(Ticket ticket);

  // Blocks until every worker has reached the barrier `name`.
  Status Barrier(const std::string& name);
  // Tells the scheduler this worker is done; the last one ends the job.
  Status Finish();

  // Sync mode recovery. When a shard restarts from its checkpoint, the job
  // rolls back: pending and new Push/Pull tickets end with a RolledBack
  // status. Recover() then waits until every shard has restored and returns
  // the step to resume from; requests made after it use the new generation.
  Status Recover(uint64_t* resume_step);

  const std::vector<Part>& parts() const { return parts_; }

 private:
  struct Pending;
  explicit KVWorker(const KVOptions& options);
  Status Register();
  Status AwaitClusterView();
  void HeartbeatLoop();

  // Parts of the selected keys on each server, cut into batches of at most
  // max_part_elems elements, one RPC each.
  template <typename Ptr>
  std::vector<std::vector<const Part*>> Batches(const std::vector<Ptr>& selected) const;
  Ticket NewTicket(int requests, std::shared_ptr<Pending>* pending);
  void Complete(const std::shared_ptr<Pending>& pending, const Status& status);
  v1::RequestId NextRequestId();
  void Acknowledge(uint64_t seq);
  Status PushBatch(const std::vector<const Part*>& batch, const std::vector<const float*>& grads,
                   uint64_t step);
  Status PullBatch(const std::vector<const Part*>& batch, const std::vector<float*>& values,
                   uint64_t min_version);
  std::string ServerName(int server) const;

  const KVOptions options_;
  const uint64_t incarnation_;
  MetricsServer* metrics_;
  ResendCaller caller_;
  std::unique_ptr<v1::Scheduler::Stub> scheduler_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> servers_;
  std::vector<std::string> server_addresses_;
  int rank_ = -1;
  int num_workers_ = 0;
  std::vector<Part> parts_;

  std::mutex mutex_;
  uint64_t next_seq_ = 0;
  std::set<uint64_t> unanswered_;  // sequence numbers that may still be resent
  Ticket next_ticket_ = 1;
  std::map<Ticket, std::shared_ptr<Pending>> pending_;

  // Recovery generations, as the scheduler's heartbeats announce them.
  std::atomic<uint64_t> generation_{0};          // the one requests carry
  std::atomic<uint64_t> announced_generation_{0};
  std::atomic<uint64_t> announced_step_{0};
  std::atomic<bool> announced_ready_{true};
  Status PollHeartbeat();
  bool RollbackAnnounced() const;

  std::atomic<bool> stopping_{false};
  std::thread heartbeat_;
  std::unique_ptr<TaskPool> pool_;

  prometheus::Histogram* push_latency_ = nullptr;
  prometheus::Histogram* pull_latency_ = nullptr;
  prometheus::Counter* push_bytes_ = nullptr;
  prometheus::Counter* pull_bytes_ = nullptr;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
