// Where the trainer's parameters live between steps. Two kinds:
//  - RemoteStore: the job's parameter servers, through the KV client
//    (push gradients, pull the next parameters);
//  - LocalStore: this process, with the same optimizer code the servers
//    run, for the single-process baseline (`kubeps train-local`).
// The training loop is written once against this interface.
//
// Not thread-safe: the training loop calls its store from one thread.
#ifndef KUBEPS_WORKER_AGENT_PARAMETER_STORE_H_
#define KUBEPS_WORKER_AGENT_PARAMETER_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "common/optimizer.h"
#include "common/status.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/trainer/model.h"

namespace kubeps {

class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  // Makes the model's parameters the job's initial ones: rank 0's values
  // are stored; every worker's model ends up holding them.
  virtual Status Init(trainer::Model& model) = 0;
  // The step training starts from: 0, or, for a job run again over its
  // checkpoints (or a worker restarted mid-job), the step the job resumes at.
  uint64_t start_step() const { return start_step_; }
  // Whether that step is the running job's, past its last recovery's: this
  // process joins workers that trained on (restarted, or taken in).
  bool joins_running_job() const { return joins_running_job_; }
  // Applies the gradients computed on the parameters of `step` and leaves
  // the next parameters in the model. A RolledBack status means the job
  // went back to an earlier step: call Resume().
  virtual Status Update(uint64_t step, trainer::Model& model) = 0;
  // After a rollback: waits until the job may go on, loads the parameters
  // of the step to resume from into the model and returns that step.
  virtual Status Resume(trainer::Model& model, uint64_t* step) {
    return Status::Error("this parameter store cannot roll back");
  }
  // Before the forward pass of `step`.
  virtual void BeginStep(uint64_t step) {}
  // Waits until the model holds the parameters after the last Update: a
  // store that overlaps may still be moving them when Update returns.
  virtual Status Flush() { return Status::Ok(); }
  // How long the training thread was blocked on the exchange (pulls not yet
  // answered, pushes not yet acknowledged) since the last call, in seconds:
  // the part of its steps it did not compute (kubeps_worker_exchange_wait_seconds).
  double TakeWaitedSeconds() {
    const double waited = waited_seconds_;
    waited_seconds_ = 0;
    return waited;
  }
  // Elastic jobs: what this worker does at `step` (KVWorker::Membership).
  // The local store is the one worker of every step.
  virtual Status Membership(uint64_t step, StepMembership* out) {
    out->member = true;
    out->count = 1;
    return Status::Ok();
  }
  // A worker taken into an elastic job from `step` on: loads the
  // parameters of that step into the model, once the job has them.
  virtual Status JoinAt(uint64_t step, trainer::Model& model) {
    return Status::Error("this parameter store has no other workers to join");
  }

 protected:
  uint64_t start_step_ = 0;
  bool joins_running_job_ = false;
  double waited_seconds_ = 0;  // TakeWaitedSeconds
};

class LocalStore : public ParameterStore {
 public:
  explicit LocalStore(std::unique_ptr<Optimizer> optimizer) : optimizer_(std::move(optimizer)) {}
  Status Init(trainer::Model& model) override;
  Status Update(uint64_t step, trainer::Model& model) override;

 private:
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<OptimizerState> states_;
};

struct ExchangeOptions {
  // Sync mode: push each layer's gradients during the backward pass.
  bool overlap = true;
  // With overlap, the gradients of consecutive layers travel together until
  // they hold this many bytes (or the backward pass is over): a request's
  // fixed cost (a round trip, wake-ups, the server's bookkeeping) buys
  // nothing for a small layer whose values the next forward pass needs
  // late anyway. 1 MiB, the size of DistributedDataParallel's first bucket:
  // the MLP's 0.8 MB then goes as one request after the backward pass, the
  // CNN's in two, both during it.
  size_t bucket_bytes = 1 << 20;
  // Nothing is sent for a step whose loss is not finite (spec.nonFinite
  // Fail: the training loop fails the job instead).
  bool hold_non_finite = true;
};

// Sync mode with `overlap` (the default) and a model that reports its layers
// (trainer::Model::reports_layers): each layer's gradients are pushed as soon
// as the backward pass has made them (the model tells the store,
// trainer::StepObserver; small layers together, ExchangeOptions), and each
// layer's next parameters are waited for only when the next forward pass
// reaches that layer. Update then returns without waiting, and a failure of
// its exchange (a rollback) is reported by the next Update, or by Flush. No
// gradient of a step goes out before every exchange of the step before it
// has succeeded, nor when the step's loss is not finite and
// `hold_non_finite`, so what the servers see is what they see without
// overlap. Otherwise, and in async mode, Update moves every tensor and waits.
class RemoteStore : public ParameterStore, private trainer::StepObserver {
 public:
  RemoteStore(KVWorker* kv, bool sync, const ExchangeOptions& options = {})
      : kv_(kv),
        sync_(sync),
        overlap_(sync && options.overlap),
        bucket_bytes_(options.bucket_bytes),
        hold_non_finite_(options.hold_non_finite) {}
  Status Init(trainer::Model& model) override;
  void BeginStep(uint64_t step) override;
  Status Update(uint64_t step, trainer::Model& model) override;
  Status Resume(trainer::Model& model, uint64_t* step) override;
  Status Flush() override;
  Status Membership(uint64_t step, StepMembership* out) override {
    return kv_->Membership(step, out);
  }
  Status JoinAt(uint64_t step, trainer::Model& model) override;

 private:
  // Where the KV client has a shared-memory region for every tensor (a
  // server on this host maps the worker's segment, or the pod's agent
  // shares one), the model's values and gradients move there: the backward
  // pass writes each gradient where it is pushed from, and each pull lands
  // where the forward pass reads, so the exchange copies nothing here.
  // Every exchange keeps the KV client's rule: a tensor's gradient is not
  // written again before its push was waited for, nor its values read
  // before its pull was.
  void PlaceInSharedMemory(trainer::Model& model);
  // After a pull of [first, end) was waited for: the model reads each
  // tensor's values where that pull put them (they may alternate between
  // two places, KVOptions::map_values).
  void FollowValues(size_t first, size_t end);
  // Pulls every tensor's values of `version` and waits for them.
  Status PullAll(uint64_t version);
  // KVWorker::Wait, its time counted as waited.
  Status Wait(KVWorker::Ticket ticket);
  void ParametersNeeded(size_t first, size_t end) override;
  void GradientsReady(size_t first, size_t end) override;
  void LossComputed(float loss) override;
  // Pushes the gradients of [first, end) and pulls the next values, for step_.
  void Exchange(size_t first, size_t end);
  void ExchangeBucket();  // the layers reported and not yet sent, if any
  // Waits for the exchanges that touch [first, end); the first failure is
  // kept in failure_.
  void WaitFor(size_t first, size_t end);
  Status TakeFailure();
  std::string Names(size_t first, size_t end) const;  // for the step trace

  struct InFlight {
    size_t first, end;
    KVWorker::Ticket ticket;
  };

  KVWorker* kv_;
  trainer::Model* placed_ = nullptr;  // the model, once its values lie in shared memory
  bool sync_;
  bool overlap_;
  size_t bucket_bytes_;
  bool hold_non_finite_;
  bool holding_ = false;  // this step's loss is not finite: its gradients stay here
  std::vector<const float*> grads_;
  std::vector<float*> values_;
  std::vector<std::string> names_;
  std::vector<size_t> bytes_;  // by parameter
  uint64_t step_ = 0;          // the step whose gradients the model computes
  // Layers whose gradients are ready and wait for more to fill a bucket.
  size_t bucket_first_ = 0, bucket_end_ = 0;
  std::vector<bool> sent_;  // by parameter: its gradient of step_ is on its way
  std::vector<InFlight> in_flight_;
  Status failure_;  // of an exchange not yet reported
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_PARAMETER_STORE_H_
