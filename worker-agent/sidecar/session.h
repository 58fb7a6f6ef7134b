// One training process's session with its agent (docs/sidecar-protocol.md,
// "Session" and "Requests"): the state machine hello -> declare -> init ->
// push / pull / push_pull / wait / barrier / membership -> finish -> bye, with every error
// of the protocol's table; the client's handles mapped to KV client tickets
// on the session's shared-memory file; and a sync job's rollback (a wait
// that fails Aborted recovers, pulls the resume step's parameters into every
// values region, and says which step that is).
//
// Thread-safe as the server uses it: Handle is called by one reader thread,
// in the order requests arrive. Requests that block (init, wait, barrier,
// membership, finish) run on the server's pool and reply from there, so replies may come
// out of order; Close, called after the last Handle, waits for them.
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_SESSION_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_SESSION_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/task_pool.h"
#include "worker-agent/sidecar/shared_tensors.h"
#include "worker-agent/sidecar/step_metrics.h"

namespace kubeps::sidecar {

inline constexpr int kProtocolVersion = 1;

// What a session needs from the agent that serves it.
struct SessionContext {
  KVWorker* kv = nullptr;
  TaskPool* pool = nullptr;         // runs the requests that block
  StepMetrics* metrics = nullptr;   // may be null
  std::string socket_dir;           // where the shared-memory file goes
  std::string nonce;                // agent.json's: the client read our directory
  bool sync = true;                 // the job's mode
  std::string optimizer = "sgd";    // the servers' (none: they only average)
  std::string non_finite = "Fail";  // spec.nonFinite: Fail or SkipStep
  // spec.replicaSpecs.worker.elasticPolicy is set: the job's workers may
  // change, so the program asks which steps it computes (membership) and
  // pushes only those.
  bool elastic = false;
  // spec.batchSize: a fixed job's global batch is this x its workers, cut
  // by rank (an elastic job's comes from the scheduler's schedule).
  uint64_t batch_size = 0;
  // spec.checkpoint.intervalSteps: a sync rollback goes back to one of its
  // multiples, so the program keeps its own state at those steps.
  uint64_t checkpoint_interval = 0;
  // Set by every session's first push: this worker has computed steps, so
  // a step it no longer computes, with none later, means it was scaled away
  // (not that it waits to be taken in). May be null.
  std::atomic<bool>* computed = nullptr;
  // Told, at the program's finish, the step from which its worker was
  // scaled away, when membership said so: the agent's last words. May be
  // empty.
  std::function<void(uint64_t step)> on_scaled_away;
  // Element counts this worker declared to the servers in an earlier session
  // (empty before the first init); a session's init sets them. A restarted
  // training process must declare the same tensors.
  std::vector<uint64_t>* known_numels = nullptr;
  // Told when a request fails in a way that ends the job, not the process
  // (a shard refused a NaN gradient: the model diverged), with the
  // termination reason; the agent writes it as its last words, since the
  // client's own exit code says only that it failed. May be empty.
  std::function<void(const std::string& reason, const std::string& message)> on_job_failure;
  // Told when a later request of the session cured a failure said with
  // `reason` (an init retried with restores_own_state), which is then
  // forgotten: the worker's next failure is an ordinary one. May be empty.
  std::function<void(const std::string& reason)> on_job_failure_cured;
  // Where the KV client can hold tensors of these sizes in its own shared
  // segment (a server on this host maps it: kubeps run), that segment; the
  // program's regions are then the KV client's own (SharedValues,
  // SharedGrads), and the agent copies nothing. May be empty, or answer
  // nothing: the session's file of its own.
  std::function<std::optional<SegmentFile>(const std::vector<uint64_t>& numels)> kv_segment;
};

class Session {
 public:
  using Send = std::function<void(const nlohmann::json& reply)>;
  enum class Next { kRead, kBye };

  Session(SessionContext context, Send send);
  ~Session();  // Close()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Handles one request: replies through `send` now, or later from the pool.
  // kBye: the client said bye (not yet answered: Close, then ByeReply).
  Next Handle(const nlohmann::json& request);
  nlohmann::json ByeReply() const;

  // Ends the session: waits for the requests in flight and for the data
  // moves the client never waited for (they use the mapping), then unmaps
  // and deletes the shared-memory file. Idempotent.
  void Close();

  bool finished() const { return finished_; }        // the client said finish
  uint64_t hello_pid() const { return hello_pid_; }  // as the client sees itself; 0 before hello

 private:
  enum class Kind { kPush, kPull, kPushPull };
  enum class InitState { kNotYet, kRunning, kDone };
  struct Transfer {
    KVWorker::Ticket ticket = 0;
    Kind kind = Kind::kPush;
    uint64_t step = 0;        // push and push_pull: the step; pull: min_version
    uint64_t recoveries = 0;  // recoveries_ when it was issued
  };
  // A reply in the making: ok with `fields`, or `code` and `error` (and
  // fields, e.g. resume_step).
  struct Outcome {
    const char* code = nullptr;  // null: ok
    std::string error;
    nlohmann::json fields = nlohmann::json::object();
    // The KV client's Status::reason: the scheduler's, where it stopped the job.
    std::string stop_reason = "";
    bool ok() const { return code == nullptr; }
  };
  // A failure of the KV client, its message led by `what` ("wait: ").
  static Outcome Failed(const Status& status, const std::string& what);

  static nlohmann::json ToReply(const nlohmann::json& id, const Outcome& outcome);
  Outcome NamingAnIncurableStop(Outcome outcome);
  Outcome Hello(const nlohmann::json& request);
  Outcome Declare(const nlohmann::json& request);
  // The program's regions in the KV client's own segment, where it has one
  // for these tensors (SessionContext::kv_segment); *out stays null where not.
  Status LinkKVSegment(const std::vector<uint64_t>& numels, std::unique_ptr<SharedTensors>* out);
  std::optional<Outcome> StartInit(const nlohmann::json& id, const nlohmann::json& request);
  Outcome StartTransfer(Kind kind, const char* op, const nlohmann::json& request);
  std::optional<Outcome> StartWait(const nlohmann::json& id, const nlohmann::json& request);
  std::optional<Outcome> StartBarrier(const nlohmann::json& id, const nlohmann::json& request);
  std::optional<Outcome> StartFinish(const nlohmann::json& id);
  // session_membership.cc: who computes a step, and the check that an
  // elastic job's program pushes only the steps it computes.
  std::optional<Outcome> StartMembership(const nlohmann::json& id, const nlohmann::json& request);
  Outcome AnswerMembership(uint64_t step);
  Outcome Checkpoints();
  // Why a push of `step` may not be made in an elastic job (empty when it
  // may); mutex_ held.
  std::string NotAMemberOf(const char* op, uint64_t step) const;

  // Runs `work` on the pool; what it returns is the reply to `id`.
  void RunLater(const nlohmann::json& id, std::function<Outcome()> work);
  // `held`: the steps the program holds its own state of, where it said.
  Outcome Initialize(bool restores_own_state, const std::optional<std::vector<uint64_t>>& held);
  // An init no rerun of the program cures: the job fails with `reason`.
  Outcome RefuseInit(const char* reason, const std::string& why);
  Outcome WaitFor(const std::vector<Transfer>& transfers);
  void CountSteps(const std::vector<Transfer>& transfers);
  // Pulls every tensor into its values region; *version: their step.
  Status PullAll(uint64_t min_version, uint64_t* version);
  // After an Aborted request issued at recovery count `recoveries`: waits
  // for the job's recovery and pulls the resume step's parameters (once for
  // every request of that generation).
  Status Recover(uint64_t recoveries, uint64_t* resume_step);
  // Why a data request may not be made now (empty when it may); mutex_ held.
  std::string NotReadyForData(const char* op) const;

  const SessionContext context_;
  const Send send_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;  // in_flight_ fell to 0
  int in_flight_ = 0;             // requests running on the pool
  bool said_hello_ = false;
  nlohmann::json bye_id_;
  std::atomic<uint64_t> hello_pid_{0};
  std::unique_ptr<SharedTensors> tensors_;  // set by declare, fixed until Close
  std::vector<std::string> names_;
  InitState init_ = InitState::kNotYet;
  std::atomic<bool> finished_{false};
  uint64_t next_handle_ = 1;
  std::map<uint64_t, Transfer> transfers_;  // issued, not yet waited for
  bool pushed_since_step_ = false;          // step counting (async: push, then pull)
  uint64_t last_push_step_ = 0;
  // The step whose parameters were counted last: a program that exchanges
  // each layer apart (overlapping its backward pass) completes one step
  // with several push_pulls, counted once.
  uint64_t counted_step_ = 0;
  // Elastic: the steps membership said this worker computes, the latest
  // answers (pushes of others are refused: a rollback's resume step, asked
  // again, is below those before it), and the step it was scaled away from.
  std::deque<uint64_t> member_steps_;
  std::optional<uint64_t> scaled_away_at_;

  std::mutex recovery_mutex_;  // one recovery at a time
  std::atomic<uint64_t> recoveries_{0};
  uint64_t resume_step_ = 0;
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_SESSION_H_
