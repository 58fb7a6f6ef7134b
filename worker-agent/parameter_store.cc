#include "worker-agent/parameter_store.h"

#include <chrono>
#include <cmath>

#include <omp.h>

#include "common/step_trace.h"
#include "common/update_threads.h"

namespace kubeps {

Status LocalStore::Init(trainer::Model& model) {
  states_.assign(model.parameters().size(), OptimizerState{});
  return Status::Ok();
}

namespace {

// A big parameter's update split over the model's own OpenMP threads (those
// of its BLAS calls and layers, idle while the optimizer runs, and after the
// backward pass still awake), one range each; the same ranges as a
// server's threads take (common/update_threads.h).
void OnTheModelsThreads(size_t n, const UpdateThreads::Range& range) {
  const int ranges = UpdateThreads::RangesFor(n, omp_get_max_threads());
  if (ranges <= 1) return range(0, n);
#pragma omp parallel for schedule(static) num_threads(ranges)
  for (int k = 0; k < ranges; ++k) {
    size_t begin, end;
    UpdateThreads::Bounds(n, ranges, k, &begin, &end);
    range(begin, end);
  }
}

}  // namespace

Status LocalStore::Update(uint64_t step, trainer::Model& model) {
  auto& params = model.parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    float* value = params[k].value.data();
    optimizer_->ApplyInRanges(value, value, params[k].grad.data(), params[k].value.size(),
                              &states_[k], OnTheModelsThreads);
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
  sent_.assign(params.size(), false);
  for (auto& p : params) {
    names_.push_back(p.name);
    bytes_.push_back(p.value.size() * sizeof(float));
  }
  overlap_ = overlap_ && model.reports_layers();
  if (overlap_) model.set_step_observer(this);
  // First wait for the job's current generation to be ready: a job started
  // over earlier checkpoints resumes in generation 1, and rank 0's Init must
  // reach shards that have restored them.
  if (Status s = kv_->Recover(&start_step_); !s.ok()) return s;
  kv_->NameTensors(names_);
  if (Status s = kv_->InitTensors(initial, sizes); !s.ok()) return s;
  PlaceInSharedMemory(model);
  // Behind the sidecar (the agent places the parts), the step the agent
  // resumed at is known only now.
  if (kv_->parts().empty()) {
    if (Status s = kv_->Recover(&start_step_); !s.ok()) return s;
  }
  // Every worker, rank 0 included, starts from what the servers hold.
  // Async: the newest values. The start step is this worker's own (Recover),
  // which the servers' versions, every worker's updates, say nothing of.
  if (!sync_) return PullAll(0);
  // Sync: at the servers' step, which is past the last recovery's for a
  // worker restarted mid-job. Started at the recovery's, it would compute
  // every step since (each gradient dropped as one of a step applied) while
  // the other workers wait.
  for (;;) {
    uint64_t servers_step = 0;
    Status pulled = kv_->PullAtOneStep(values_, start_step_, &servers_step);
    joins_running_job_ = pulled.ok() && servers_step > start_step_;
    if (joins_running_job_) start_step_ = servers_step;
    if (!pulled.IsAborted()) {
      FollowValues(0, values_.size());
      return pulled;
    }
    // A recovery opened meanwhile (a server restarted): every worker,
    // this one too, starts at its step.
    if (Status s = kv_->Recover(&start_step_); !s.ok()) return s;
  }
}

Status RemoteStore::PullAll(uint64_t version) {
  Status pulled = Wait(kv_->Pull(values_, version));
  FollowValues(0, values_.size());
  return pulled;
}

Status RemoteStore::Wait(KVWorker::Ticket ticket) {
  const auto start = std::chrono::steady_clock::now();
  Status status = kv_->Wait(ticket);
  waited_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

void RemoteStore::PlaceInSharedMemory(trainer::Model& model) {
  auto& params = model.parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    if (!kv_->SharedValues(k) || !kv_->SharedGrads(k)) return;
  }
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].value.Place(kv_->SharedValues(k));
    params[k].grad.Place(kv_->SharedGrads(k));
    values_[k] = params[k].value.data();
    grads_[k] = params[k].grad.data();
  }
  placed_ = &model;
}

void RemoteStore::FollowValues(size_t first, size_t end) {
  if (!placed_) return;
  auto& params = placed_->parameters();
  for (size_t k = first; k < end; ++k) {
    float* now = kv_->SharedValues(k);
    if (now == values_[k]) continue;
    params[k].value.Repoint(now);
    values_[k] = now;
  }
}

void RemoteStore::BeginStep(uint64_t step) {
  step_ = step;
  holding_ = false;
  bucket_first_ = bucket_end_ = 0;
  sent_.assign(sent_.size(), false);
}

void RemoteStore::LossComputed(float loss) { holding_ = hold_non_finite_ && !std::isfinite(loss); }

void RemoteStore::ParametersNeeded(size_t first, size_t end) {
  if (!StepTrace::Get().open()) return WaitFor(first, end);
  TraceSpan span("forward pass waits for " + Names(first, end));
  WaitFor(first, end);
}

void RemoteStore::GradientsReady(size_t first, size_t end) {
  if (StepTrace::Get().open()) StepTrace::Get().Mark("gradients ready: " + Names(first, end));
  // An exchange of the step before failed (every one was waited for in this
  // step's forward pass): this step is redone or the job fails, so its
  // gradients, computed on parameters that may be of two steps, stay here.
  if (!failure_.ok() || holding_) return;
  // The backward pass reports the layers from the last to the first.
  if (bucket_first_ != bucket_end_ && end != bucket_first_) ExchangeBucket();
  if (bucket_first_ == bucket_end_) bucket_end_ = end;
  bucket_first_ = first;
  size_t bytes = 0;
  for (size_t k = bucket_first_; k < bucket_end_; ++k) bytes += bytes_[k];
  // The first layer's report ends the backward pass: nothing more to wait for.
  if (bytes >= bucket_bytes_ || first == 0) ExchangeBucket();
}

void RemoteStore::ExchangeBucket() {
  if (bucket_first_ == bucket_end_) return;
  Exchange(bucket_first_, bucket_end_);
  bucket_first_ = bucket_end_ = 0;
}

void RemoteStore::Exchange(size_t first, size_t end) {
  std::vector<const float*> grads(grads_.size(), nullptr);
  std::vector<float*> values(values_.size(), nullptr);
  for (size_t k = first; k < end; ++k) {
    grads[k] = grads_[k];
    values[k] = values_[k];
    sent_[k] = true;
  }
  in_flight_.push_back({first, end, kv_->PushPull(grads, values, step_)});
}

void RemoteStore::WaitFor(size_t first, size_t end) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->end <= first || it->first >= end) {
      ++it;
      continue;
    }
    Status s = Wait(it->ticket);
    if (!s.ok() && failure_.ok()) failure_ = s;
    FollowValues(it->first, it->end);
    it = in_flight_.erase(it);
  }
}

std::string RemoteStore::Names(size_t first, size_t end) const {
  std::string names;
  for (size_t k = first; k < end; ++k) {
    names += (names.empty() ? "" : ", ") + names_[k] + " (key " + std::to_string(k) + ")";
  }
  return names;
}

Status RemoteStore::TakeFailure() {
  Status failure = failure_;
  failure_ = Status::Ok();
  return failure;
}

Status RemoteStore::Update(uint64_t step, trainer::Model& model) {
  if (!sync_) {
    // Async: the push is applied on arrival; pull whatever is newest.
    if (Status s = Wait(kv_->Push(grads_, step)); !s.ok()) return s;
    return PullAll(0);
  }
  step_ = step;
  // The previous step's exchange failed (seen in this step's forward pass).
  if (!failure_.ok()) {
    WaitFor(0, values_.size());
    return TakeFailure();
  }
  // What the model did not announce (all of it, without overlap) goes now,
  // and is waited for here: only what a layer's report sent may still be
  // travelling when Update returns.
  bool exchanged_here = false;
  for (size_t k = 0; k < sent_.size();) {
    if (sent_[k]) {
      ++k;
      continue;
    }
    size_t end = k;
    while (end < sent_.size() && !sent_[end]) ++end;
    Exchange(k, end);
    exchanged_here = true;
    k = end;
  }
  sent_.assign(sent_.size(), false);
  if (!exchanged_here) return Status::Ok();  // waited for where the next step needs it
  return Flush();
}

Status RemoteStore::Flush() {
  WaitFor(0, values_.size());
  return TakeFailure();
}

Status RemoteStore::Resume(trainer::Model& model, uint64_t* step) {
  WaitFor(0, values_.size());  // nothing may write into the values after the pull below
  failure_ = Status::Ok();
  for (;;) {
    if (Status s = kv_->Recover(step); !s.ok()) return s;
    Status pulled = PullAll(sync_ ? *step : 0);  // async: a worker's step is no version
    if (!pulled.IsAborted()) return pulled;      // else: rolled back again meanwhile
  }
}

Status RemoteStore::JoinAt(uint64_t step, trainer::Model& model) {
  WaitFor(0, values_.size());
  failure_ = Status::Ok();
  // Async: no version belongs to a step; the newest parameters do.
  return PullAll(sync_ ? step : 0);
}

}  // namespace kubeps
