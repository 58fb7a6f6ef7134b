#include "worker-agent/parameter_store.h"

namespace kubeps {

Status LocalStore::Init(trainer::Model& model) {
  states_.assign(model.parameters().size(), OptimizerState{});
  return Status::Ok();
}

Status LocalStore::Update(uint64_t step, trainer::Model& model) {
  auto& params = model.parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    optimizer_->Apply(params[k].value.data(), params[k].grad.data(), params[k].value.size(),
                      &states_[k]);
  }
  return Status::Ok();
}

Status RemoteStore::Init(trainer::Model& model) {
  auto& params = model.parameters();
  std::vector<const float*> initial;
  std::vector<uint64_t> sizes;
  for (auto& p : params) {
    initial.push_back(p.value.data());
    sizes.push_back(p.value.size());
    grads_.push_back(p.grad.data());
    values_.push_back(p.value.data());
  }
  // First wait for the job's current generation to be ready: a job started
  // over earlier checkpoints resumes (or starts empty) in generation 1, and
  // rank 0's Init must reach shards that have restored (or discarded) them.
  if (Status s = kv_->Recover(&start_step_); !s.ok()) return s;
  if (Status s = kv_->InitTensors(initial, sizes); !s.ok()) return s;
  // Every worker, rank 0 included, starts from what the servers hold.
  return kv_->Wait(kv_->Pull(values_, start_step_));
}

Status RemoteStore::Update(uint64_t step, trainer::Model& model) {
  if (sync_) return kv_->Wait(kv_->PushPull(grads_, values_, step));
  // Async: the push is applied on arrival; pull whatever is newest.
  if (Status s = kv_->Wait(kv_->Push(grads_, step)); !s.ok()) return s;
  return kv_->Wait(kv_->Pull(values_, 0));
}

Status RemoteStore::Resume(trainer::Model& model, uint64_t* step) {
  for (;;) {
    if (Status s = kv_->Recover(step); !s.ok()) return s;
    Status pulled = kv_->Wait(kv_->Pull(values_, *step));
    if (!pulled.IsAborted()) return pulled;  // else: rolled back again meanwhile
  }
}

}  // namespace kubeps
