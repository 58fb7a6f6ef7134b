// SidecarKVWorker: KVWorker over the pod's kubeps-agent sidecar
// (KVWorker::Connect; docs/sidecar-protocol.md). The agent holds the
// worker's registration, resends, exactly-once identities and recovery; this
// client holds one session with it and the mapping of the session's
// shared-memory file.
//
// How the calls map onto the protocol:
//  - InitTensors: declare (tensor k is "tensor-<k>", shape [size]), map the
//    file, copy the initial values into the values regions, init.
//  - Push / Pull / PushPull: copy the gradients into the grads regions, send
//    the request and return a ticket at once; the agent's handle comes in
//    the reply, which Wait collects (so Push never blocks on the agent).
//  - Wait: wait for the handles, then copy the pulled values out of the
//    values regions to the caller's pointers.
//  - Recover: an aborted wait carries resume_step; the agent has already
//    recovered and pulled that step's values into the values regions.
//    Without one, the step init said the session starts from.
// The copies are skipped for a pointer that is the region itself
// (SharedGrads / SharedValues).
//
// A region serves one request at a time: a Push of a key whose grads region
// a ticket not yet waited for still reads (or a Pull of a key whose values
// region one still writes) gets a ticket that fails with
// FailedPrecondition, where the in-process client would have used the
// caller's separate buffers.
//
// Internal to the SDK (include kv_worker.h). Thread-safe as KVWorker says.
#ifndef KUBEPS_WORKER_AGENT_KV_SIDECAR_KV_WORKER_H_
#define KUBEPS_WORKER_AGENT_KV_SIDECAR_KV_WORKER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/sidecar_connection.h"

namespace kubeps {

class SidecarKVWorker final : public KVWorker {
 public:
  // Rendezvous and hello (KVWorker::Connect).
  static Status Connect(const SidecarOptions& options, std::unique_ptr<SidecarKVWorker>* out);
  // Says bye (the agent waits for the session's requests in flight and
  // deletes the file), then unmaps the file and closes the socket.
  ~SidecarKVWorker() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_servers() const override { return num_servers_; }
  Status InitTensors(const std::vector<const float*>& values,
                     const std::vector<uint64_t>& sizes) override;
  // Declared under these names (else tensor-<key>), which the servers compare.
  void NameTensors(std::vector<std::string> names) override { names_ = std::move(names); }
  Ticket Push(const std::vector<const float*>& grads, uint64_t step) override;
  Ticket Pull(const std::vector<float*>& values, uint64_t min_version) override;
  Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                  uint64_t step) override;
  Status Wait(Ticket ticket) override;
  Status WaitWithVersion(Ticket ticket, uint64_t* version) override;
  Status Barrier(const std::string& name) override;
  Status Finish() override;
  // The agent's answer (op membership): an elastic job's schedule, a fixed
  // job's rank run of spec.batchSize per worker.
  Status Membership(uint64_t step, StepMembership* out) override;
  Status Recover(uint64_t* resume_step) override;
  // The agent's answer (op checkpoints); -1 from an agent that does not say.
  int64_t NewestCommonCheckpoint() const override;
  const std::vector<Part>& parts() const override { return no_parts_; }
  float* SharedValues(uint32_t key) override;
  float* SharedGrads(uint32_t key) override;

  // What hello said about the job: "sync" or "async", and the servers'
  // optimizer ("none" when they only average).
  const std::string& mode() const { return mode_; }
  const std::string& optimizer() const { return optimizer_; }
  std::string ServersOptimizer() const override { return optimizer_; }
  // Hello's (0: an agent that does not say).
  uint64_t CheckpointInterval() const override { return checkpoint_interval_; }
  Status HoldsOwnState(std::vector<uint64_t> steps) override;
  // The step init said to start from (0 for a new job).
  uint64_t start_step() const;

 private:
  struct Region {
    uint64_t numel = 0;
    float* values = nullptr;
    float* grads = nullptr;
  };
  // One Push, Pull or PushPull: the requests it sent (their replies carry
  // the agent's handles) and where Wait copies the pulled values to.
  struct Pending {
    Status failure;  // not ok: nothing was sent, Wait returns this
    std::vector<SidecarConnection::RequestId> requests;
    std::vector<uint32_t> grads_keys;                // grads regions it reads
    std::vector<std::pair<uint32_t, float*>> pulls;  // values region -> caller (null: none)
    uint64_t expected_version = 0;                   // when the agent does not say
  };

  SidecarKVWorker(std::unique_ptr<SidecarConnection> connection, std::string socket_dir,
                  const SidecarOptions& options);
  std::vector<std::string> names_;  // NameTensors'
  Status MapFile(const nlohmann::json& declared, const std::vector<uint64_t>& sizes);
  // Push, Pull and PushPull: the keys with a pointer, their regions taken,
  // the gradients copied in, the requests sent.
  Ticket StartTransfer(const char* op, const std::vector<const float*>* grads,
                       const std::vector<float*>* values, uint64_t step);
  // Why a transfer with this many pointers may not start (mutex_ held).
  Status CheckKeys(const char* op, size_t pointers) const;
  // A new ticket for `pending`; takes the regions it uses, or fails it when
  // one is in use (mutex_ held).
  Ticket Issue(Pending pending, const char* op);
  // Sends one push, pull or push_pull of `keys`.
  SidecarConnection::RequestId SendTransfer(const char* op, const std::vector<uint32_t>& keys,
                                            const char* step_field, uint64_t step);
  void Release(const Pending& pending);  // gives its regions back

  const std::unique_ptr<SidecarConnection> connection_;
  const std::string socket_dir_;
  // SidecarOptions' or HoldsOwnState's, said at init.
  bool restores_own_state_;
  std::optional<std::vector<uint64_t>> own_state_steps_;
  int rank_ = 0, size_ = 0, num_servers_ = 0;
  std::string mode_, optimizer_;
  uint64_t checkpoint_interval_ = 0;
  const std::vector<Part> no_parts_;

  mutable std::mutex mutex_;
  bool initialized_ = false;
  uint64_t start_step_ = 0;
  std::vector<Region> regions_;  // fixed after InitTensors
  char* mapping_ = nullptr;
  uint64_t mapping_bytes_ = 0;
  std::map<Ticket, Pending> pending_;
  Ticket next_ticket_ = 1;
  std::vector<Ticket> grads_user_, values_user_;  // per key: the ticket using it, 0: none
  bool rolled_back_ = false;                      // a wait was aborted: resume_step_ holds
  uint64_t resume_step_ = 0;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_SIDECAR_KV_WORKER_H_
