// The worker's key-value client: the whole API a trainer needs to train
// against kubeps' parameter servers, in the spirit of ps-lite's KVWorker.
// This is the public header the C++ SDK installs (libkubeps.so, CMake target
// kubeps::kv): it includes no gRPC and no protobuf. Two implementations are
// behind it, as LevelDB's DBImpl is behind db.h:
//  - Start: the KV client in this process (KVWorkerImpl), which registers
//    with the job's scheduler itself; the built-in trainer uses it.
//  - Connect: a client of the pod's kubeps-agent sidecar (SidecarKVWorker,
//    docs/sidecar-protocol.md), which holds the registration, the resends
//    and the recovery; a user's own training program uses it.
//
//   std::unique_ptr<KVWorker> kv;
//   KVWorker::Connect(SidecarOptions(), &kv);  // or Start(options, &kv)
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
// returns the first failure, which names the shard and the RPC (or, behind
// the sidecar, carries the agent's message and code).
//
// Thread-safe: Push, Pull, PushPull and Wait may be called from several
// threads (each ticket waited for once); InitTensors comes first. It may
// come again with the same sizes and no ticket open (a restarted training
// process behind the sidecar): the servers keep their values.
#ifndef KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
#define KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/resend_policy.h"
#include "common/status.h"
#include "common/step_membership.h"
#include "worker-agent/kv/placement.h"
#include "worker-agent/kv/sdk_export.h"

namespace kubeps {

class MetricsServer;

struct KVOptions {
  std::string scheduler_address;
  std::string node_id;  // stable identity: a restart keeps the rank
  // The job's token: `token_file` names the file that holds it, read again
  // when it changes (a rotated Secret); else `token`, fixed. Both empty: none.
  std::string token;
  std::string token_file;
  // Mutual TLS (spec.security.tls): the directory of the job's ca.crt and
  // this replica's tls.crt and tls.key. Empty: plain TCP.
  std::string tls_dir;
  std::string metrics_address;  // reported to the scheduler
  ResendPolicy resend;
  PlacementOptions placement;
  // Over TCP, the most elements one request carries to a server (a part
  // longer goes alone). Each request costs a call on both sides, so bigger
  // ones cost less CPU a byte; smaller ones keep more in flight, and let a
  // tensor the next forward pass needs first overtake sooner. BytePS cuts
  // tensors at 4 MB too.
  uint64_t tcp_request_elems = 1 << 20;  // 4 MiB of float32: two parts
  int pull_wait_ms = 500;                // server-side long-poll slice
  int peer_wait_limit_ms = 600000;       // give up waiting for slow peers after this
  int heartbeat_interval_ms = 500;
  MetricsServer* metrics = nullptr;  // null: metrics are not exported
  // How gradients travel (spec.compression): "none", "fp16", "bf16" or
  // "2bit", whose codes stand for +-compression_threshold.
  std::string compression = "none";
  float compression_threshold = 0.5f;
  // Tensors to and from servers on this host go through a file of shared
  // memory instead of the TCP connection, where the server can map it
  // (docs/shared-memory.md). A server counts as on this host
  // when its address is a loopback one and, where `own_host` (this process's
  // address: its pod IP) is set, the same as that: pods of one node are at
  // addresses of their own and do not share their /dev/shm.
  bool shared_memory = true;
  std::string own_host;
  // A sync job's built-in trainer: big tensors are read where the servers on
  // this host keep them instead of being copied into the model each step
  // (shared_memory_path.h), so SharedValues(key) names, after each Pull or
  // PushPull of SharedValues(key), one of two places by the version's
  // parity. Not behind the sidecar: the program reads the agent's file.
  bool map_values = false;
  // The job's workers may change (elasticPolicy): Membership waits for the
  // scheduler's schedule instead of taking the fixed one.
  bool elastic = false;
  // An async job: each worker's steps are its own, and the servers'
  // versions count every worker's updates. Pushes say their step in the
  // heartbeats, and a restarted process, or a program restarted beside the
  // same agent, starts at the step said last (Recover).
  bool async = false;
  // Sync mode: spec.checkpoint.intervalSteps, whose multiples a rollback
  // goes back to. A two-bit job keeps its residuals as of those steps, so
  // that the steps redone after a rollback send what they sent before.
  uint64_t checkpoint_interval = 0;
};

// Where to find the pod's kubeps-agent sidecar (KVWorker::Connect).
struct SidecarOptions {
  // The directory the agent shares with this process (agent.json,
  // agent.sock, the tensors' shared-memory file). Empty: the environment
  // variable KUBEPS_SOCKET_DIR, which kubeps run and the operator set.
  std::string socket_dir;
  // How long Connect waits for the agent to appear (it may still be
  // registering with the job's scheduler) and to accept the session.
  int connect_timeout_ms = 120000;
  // The program puts back its own state (its parameters and optimizer
  // state, from its own checkpoint) of the step InitTensors starts it at.
  // With the servers' optimizer none they hold no parameters, so the agent
  // refuses a start past step 0 without it (FailedPrecondition, and the job
  // fails with reason ProgramStateMissing).
  bool restores_own_state = false;
  // Where given, the only steps it can put back (those it saved): where the
  // job is at another (killed after the servers' checkpoint of a step, before
  // its own save of it), the job goes back to the newest of them every shard
  // holds, or fails with reason ProgramStateMissing where there is none.
  std::optional<std::vector<uint64_t>> own_state_steps;
};

class KUBEPS_EXPORT KVWorker {
 public:
  using Ticket = uint64_t;

  // Registers with the scheduler and waits for the cluster to be complete.
  // On success stores the client in *out and returns OK; otherwise *out is
  // left alone and the status says which peer could not be reached.
  static Status Start(const KVOptions& options, std::unique_ptr<KVWorker>* out);

  // Opens a session with the pod's kubeps-agent sidecar: waits (up to
  // connect_timeout_ms) for <socket_dir>/agent.json, connects to
  // agent.sock and presents agent.json's nonce, so a directory mounted from
  // another pod is refused. On success stores the client in *out and
  // returns OK; otherwise Unavailable (no agent), InvalidArgument (another
  // protocol or nonce) or FailedPrecondition (another process of the pod
  // holds the agent), with the agent's message.
  //
  // Tensor data travels through a file of shared memory, never through the
  // socket. Push copies the caller's gradients into it before it returns
  // (the caller's buffers are free again at once) and Wait copies pulled
  // values out of it to the caller's pointers: one memcpy each way per
  // tensor. A caller that passes SharedGrads(key) / SharedValues(key) as
  // the key's pointer is not copied at all. Each tensor has one grads and
  // one values region, so a Push (Pull) of a key whose region a ticket not
  // yet waited for still uses fails, at Wait, with FailedPrecondition.
  // InitTensors comes once per connection.
  //
  // Destroying the client ends the session (the agent keeps the worker's
  // rank for a restarted process); after Finish it serves no other session
  // and waits for SIGTERM, as a native sidecar.
  static Status Connect(const SidecarOptions& options, std::unique_ptr<KVWorker>* out);

  virtual ~KVWorker() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int num_servers() const = 0;

  // Declares the tensors (sizes in elements, key = index) and sets their
  // initial values: rank 0's `values` are stored, the others' ignored (the
  // broadcast of initial weights; a null pointer is allowed where ignored).
  // Returns when every worker has declared. It does not write `values`:
  // Pull the parameters to start from; WaitWithVersion on that pull says
  // their step, where a restarted process resumes. REQUIRES: every
  // size >= 1; no ticket open.
  virtual Status InitTensors(const std::vector<const float*>& values,
                             const std::vector<uint64_t>& sizes) = 0;

  // Gradients computed on parameters of version `step` (sync mode). The
  // ticket owns no copy of `grads`: REQUIRES: the buffers stay valid and
  // unchanged until the ticket is waited for, each as long as its tensor.
  virtual Ticket Push(const std::vector<const float*>& grads, uint64_t step) = 0;
  // Parameters of at least version `min_version` (0 in async mode), written
  // to `values` by the time Wait returns OK. REQUIRES: the buffers stay
  // valid, and unread, until the ticket is waited for.
  virtual Ticket Pull(const std::vector<float*>& values, uint64_t min_version) = 0;
  // Push, then pull version step+1 once the push is acknowledged.
  virtual Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                          uint64_t step) = 0;
  // Blocks until every request of `ticket` is answered; OK, or the first
  // failure (Aborted: see Recover). A ticket is waited for once; an unknown
  // one is an error. A failure of Push/Pull itself (a key never declared,
  // a call before InitTensors) is reported here, not by Push/Pull.
  virtual Status Wait(Ticket ticket) = 0;
  // Wait, and for a pull (or the pull half of PushPull) *version receives
  // the smallest version among the values received: in sync mode the step
  // the parameters are of, which a restarted process resumes from; 0 when
  // the ticket pulled nothing.
  virtual Status WaitWithVersion(Ticket ticket, uint64_t* version) = 0;
  // Sync mode: Pull and wait for the parameters of one step, `min_version`
  // or past it, and *version that step: where a restarted process starts. A
  // worker killed between its pushes to two parts leaves them a step apart;
  // asked again for the smaller version, the part ahead answers as it was
  // then, so `values` never mix two steps.
  Status PullAtOneStep(const std::vector<float*>& values, uint64_t min_version, uint64_t* version);

  // Blocks until every worker has reached the barrier `name`. A name is
  // released once per job: pass a new one each time (e.g. with the epoch).
  virtual Status Barrier(const std::string& name) = 0;
  // Tells the scheduler this worker is done; the last one ends the job.
  // REQUIRES: no Push/Pull after it; behind the sidecar, InitTensors
  // succeeded.
  virtual Status Finish() = 0;

  // Elastic jobs (spec.replicaSpecs.worker.elasticPolicy): what this worker
  // does at sync step `step`: whether it computes the step and which of the
  // step's examples are its own. Blocks until the job's scheduler has fixed
  // the step's workers (at most about a round trip: it keeps the schedule
  // a fifth of a second of steps ahead). A job whose workers are fixed: every worker,
  // each its rank's share, and global_batch 0 (the caller knows it); behind
  // the sidecar the agent fills in the examples of spec.batchSize per worker.
  virtual Status Membership(uint64_t step, StepMembership* out) {
    out->member = true;
    out->position = rank();
    out->count = size();
    return Status::Ok();
  }

  // Sync mode recovery. When a shard restarts from its checkpoint, the job
  // rolls back: pending and new Push/Pull tickets end with an aborted status
  // (Status::IsAborted). Recover() then waits until every shard has restored
  // and returns the step to resume from; requests made after it use the new
  // generation. Called before InitTensors, it waits for the job's current
  // generation and returns the step the job starts from. Behind the sidecar
  // the agent has recovered before the aborted Wait returned, and before
  // the session began: Recover returns the step of the last aborted Wait,
  // or where none was, the step the session starts from (known once
  // InitTensors has returned; 0 before). In an async job (KVOptions::async)
  // a worker's steps are its own: Recover returns, where it is later, the
  // step after its last push waited for with success (of one in flight, the
  // step itself), or the step the process it replaced said last.
  virtual Status Recover(uint64_t* resume_step) = 0;

  // Where each part of each tensor lives (after InitTensors). Behind the
  // sidecar the agent places the parts, and this list is empty.
  virtual const std::vector<Part>& parts() const = 0;

  // Zero copy: the shared-memory regions of tensor `key` (after
  // InitTensors). A caller that computes its gradients into SharedGrads(key)
  // and passes it to Push, or passes SharedValues(key) to Pull, saves the
  // copy. The protocol's rule holds: do not write a grads region until the
  // push reading it was waited for, nor read a values region before its
  // pull was. Behind the sidecar they are the regions the agent shares with
  // this process (valid until the client is destroyed). The in-process
  // client (Start) has them where a server on this host can map the
  // worker's segment (`kubeps run`), in it (valid until tensors of other
  // sizes are declared), and SharedGrads only where pushes are float32.
  // With KVOptions::map_values, SharedValues(key) may move with each pull of
  // it (read it again once the pull was waited for). Null for a key never
  // declared, and where there is no such region.
  virtual float* SharedValues(uint32_t key) { return nullptr; }
  virtual float* SharedGrads(uint32_t key) { return nullptr; }

  // The tensors' names (one per key), before InitTensors: the servers keep
  // them with the parts and refuse a worker that declares another tensor
  // under a key (keys are positional). Without names nothing is compared.
  // (Methods added since the first release come last, so that those before
  // them keep their places for programs built against an earlier libkubeps.)
  virtual void NameTensors(std::vector<std::string> names) { (void)names; }

  // Sync mode: the newest step every shard holds a checkpoint of, as the
  // scheduler last said (-1 where none is known). A rollback goes back to
  // the newest such step when it happens, so not before this one, but where
  // a shard finds that checkpoint damaged or lost: a program that keeps
  // copies of its own state for rollbacks keeps this step's first.
  virtual int64_t NewestCommonCheckpoint() const { return -1; }

  // Sync mode, the servers' optimizer none: the program keeps its own state
  // and holds it only of the steps in `held`, none of them `start`, where
  // the job has it start. Asks the scheduler to roll the job back to the
  // newest step at or before `start` that every shard and the program hold,
  // and waits for every shard to have restored it (as Recover): that step in
  // *resume_step. An error, naming why, where there is no such step: with
  // reason ProgramStateMissing where the scheduler found none.
  virtual Status RollBackToHeldState(uint64_t start, const std::vector<uint64_t>& held,
                                     uint64_t* resume_step) {
    (void)start, (void)held, (void)resume_step;
    return Status::Error("this client cannot roll the job back");
  }

  // Sync mode: spec.checkpoint.intervalSteps (0 where the client is not
  // told). A rollback's resume step is one of its multiples, or the step
  // the job resumed at: a program that keeps state of its own (its
  // optimizer's, with the servers' optimizer none) keeps a copy at those
  // steps (RollbackCopies, rollback_copies.h).
  virtual uint64_t CheckpointInterval() const { return 0; }

  // SidecarOptions::own_state_steps (and restores_own_state), said once
  // connected: a program that keeps its own checkpoints by rank learns
  // which it holds only then. Before InitTensors (FailedPrecondition after
  // it, and from a client without an agent, whose servers hold the state).
  virtual Status HoldsOwnState(std::vector<uint64_t> steps) {
    (void)steps;
    return Status::FailedPrecondition("this client keeps no state of the program's");
  }

  // The servers' optimizer as the job names it: "none" where they only
  // average the gradients, and the program updates its own parameters.
  // Empty where the client is not told.
  virtual std::string ServersOptimizer() const { return {}; }
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_KV_WORKER_H_
