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
  // Applies the gradients computed on the parameters of `step` and leaves
  // the next parameters in the model. A RolledBack status means the job
  // went back to an earlier step: call Resume().
  virtual Status Update(uint64_t step, trainer::Model& model) = 0;
  // After a rollback: waits until the job may go on, loads the parameters
  // of the step to resume from into the model and returns that step.
  virtual Status Resume(trainer::Model& model, uint64_t* step) {
    return Status::Error("this parameter store cannot roll back");
  }

 protected:
  uint64_t start_step_ = 0;
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

class RemoteStore : public ParameterStore {
 public:
  RemoteStore(KVWorker* kv, bool sync) : kv_(kv), sync_(sync) {}
  Status Init(trainer::Model& model) override;
  Status Update(uint64_t step, trainer::Model& model) override;
  Status Resume(trainer::Model& model, uint64_t* step) override;

 private:
  KVWorker* kv_;
  bool sync_;
  std::vector<const float*> grads_;
  std::vector<float*> values_;
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_PARAMETER_STORE_H_
