// The worker's key-value client: the whole API a trainer needs to train
// against kubeps' parameter servers, in the spirit of ps-lite's KVWorker.
// This is the public header the C++ SDK installs: it includes no gRPC and no
// protobuf (the implementation, KVWorkerImpl, is behind it, as LevelDB's
// DBImpl is behind db.h).
//
//   std::unique_ptr<KVWorker> kv;
//   KVWorker::Start(options, &kv);             // register, get rank, find shards
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
// Thread-safe: Push, Pull, PushPull and Wait may be called from several
// threads (each ticket waited for once); InitTensors comes first. It may
// come again with the same sizes and no ticket open (a restarted training
// process behind the sidecar): the servers keep their values.
#ifndef KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
#define KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/resend_policy.h"
#include "common/status.h"
#include "worker-agent/kv/placement.h"

namespace kubeps {

class MetricsServer;

struct KVOptions {
  std::string scheduler_address;
  std::string node_id;  // stable identity: a restart keeps the rank
  std::string token;
  std::string metrics_address;  // reported to the scheduler
  ResendPolicy resend;
  PlacementOptions placement;
  int pull_wait_ms = 500;           // server-side long-poll slice
  int peer_wait_limit_ms = 600000;  // give up waiting for slow peers after this
  int heartbeat_interval_ms = 500;
  MetricsServer* metrics = nullptr;  // null: metrics are not exported
};

class KVWorker {
 public:
  using Ticket = uint64_t;

  // Registers with the scheduler and waits for the cluster to be complete.
  static Status Start(const KVOptions& options, std::unique_ptr<KVWorker>* out);
  virtual ~KVWorker() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int num_servers() const = 0;

  // Declares the tensors (sizes in elements, key = index) and sets their
  // initial values: rank 0's `values` are stored, the others' ignored (the
  // broadcast of initial weights). Returns when every worker has declared.
  virtual Status InitTensors(const std::vector<const float*>& values,
                             const std::vector<uint64_t>& sizes) = 0;

  // Gradients computed on parameters of version `step` (sync mode).
  virtual Ticket Push(const std::vector<const float*>& grads, uint64_t step) = 0;
  // Parameters of at least version `min_version` (0 in async mode).
  virtual Ticket Pull(const std::vector<float*>& values, uint64_t min_version) = 0;
  // Push, then pull version step+1 once the push is acknowledged.
  virtual Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                          uint64_t step) = 0;
  virtual Status Wait(Ticket ticket) = 0;
  // Wait, and for a pull (or the pull half of PushPull) *version receives
  // the smallest version among the values received: in sync mode the step
  // the parameters are of, which a restarted process resumes from; 0 when
  // the ticket pulled nothing.
  virtual Status WaitWithVersion(Ticket ticket, uint64_t* version) = 0;

  // Blocks until every worker has reached the barrier `name`.
  virtual Status Barrier(const std::string& name) = 0;
  // Tells the scheduler this worker is done; the last one ends the job.
  virtual Status Finish() = 0;

  // Sync mode recovery. When a shard restarts from its checkpoint, the job
  // rolls back: pending and new Push/Pull tickets end with an aborted status
  // (Status::IsAborted). Recover() then waits until every shard has restored
  // and returns the step to resume from; requests made after it use the new
  // generation.
  virtual Status Recover(uint64_t* resume_step) = 0;

  // Where each part of each tensor lives (after InitTensors).
  virtual const std::vector<Part>& parts() const = 0;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
