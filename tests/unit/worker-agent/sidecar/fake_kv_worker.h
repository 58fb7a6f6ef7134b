// An in-memory KVWorker for the sidecar's tests: the "servers" hold one
// vector per key; a push applies SGD with learning rate 1 (value -= grad)
// and moves the version on; a pull copies the values out. Data moves when
// the ticket is waited for (as late as the real client may move it), so a
// test sees exactly what the session waited for. A test can roll the job
// back (tickets of the old generation end Aborted until Recover restores a
// given step and values) and hold tickets until it releases them.
//
// Thread-safe.
#ifndef KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_FAKE_KV_WORKER_H_
#define KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_FAKE_KV_WORKER_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "worker-agent/kv/kv_worker.h"

namespace kubeps::sidecar {

class FakeKVWorker : public KVWorker {
 public:
  struct PushRecord {
    uint64_t step = 0;
    std::map<size_t, std::vector<float>> grads;  // by key
  };

  explicit FakeKVWorker(int rank = 0, int size = 1) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_servers() const override { return 2; }

  Status InitTensors(const std::vector<const float*>& values,
                     const std::vector<uint64_t>& sizes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++init_calls_;
    if (store_.empty()) {  // the first value wins, as on the servers
      for (size_t k = 0; k < sizes.size(); ++k)
        store_.emplace_back(values[k], values[k] + sizes[k]);
    }
    // As the in-process client places them: each tensor whole, on a server.
    parts_.clear();
    for (size_t k = 0; k < sizes.size(); ++k)
      parts_.push_back({static_cast<uint32_t>(k), 0, sizes[k], static_cast<int>(k % 2)});
    return Status::Ok();
  }

  Ticket Push(const std::vector<const float*>& grads, uint64_t step) override {
    return NewTicket([this, grads, step] { ApplyPush(grads, step); });
  }
  Ticket Pull(const std::vector<float*>& values, uint64_t min_version) override {
    return NewTicket([this, values, min_version] { CopyOut(values, min_version); });
  }
  Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                  uint64_t step) override {
    return NewTicket([this, grads, values, step] {
      ApplyPush(grads, step);
      CopyOut(values, step + 1);
    });
  }
  Status Wait(Ticket ticket) override {
    uint64_t version = 0;
    return WaitWithVersion(ticket, &version);
  }
  Status WaitWithVersion(Ticket ticket, uint64_t* version) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end())
      return Status::Error("Wait: unknown ticket " + std::to_string(ticket));
    Pending pending = std::move(it->second);
    tickets_.erase(it);
    if (pending.held && release_count_ == pending.held_at) {
      ++blocked_waits_;
      released_.notify_all();
    }
    released_.wait(lock, [&] { return !pending.held || release_count_ > pending.held_at; });
    if (pending.generation < announced_generation_) {
      return Status::Aborted("ticket " + std::to_string(ticket) + ": the job rolled back");
    }
    lock.unlock();
    pending.move_data();
    lock.lock();
    *version = version_;
    return Status::Ok();
  }

  Status Barrier(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    barriers_.push_back(name);
    return barrier_failure_;
  }
  // Every barrier from now on ends with `failure` (the scheduler's stop of the job).
  void FailBarriers(Status failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    barrier_failure_ = std::move(failure);
  }
  Status Finish() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++finish_calls_;
    return Status::Ok();
  }
  Status Recover(uint64_t* resume_step) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++recover_calls_;
    // The servers go back only where a rollback was announced; the step said
    // is the job's last recovery's, as the scheduler's (0 before any).
    if (generation_ < announced_generation_) {
      store_ = rollback_values_;
      version_ = rollback_step_;
    }
    generation_ = announced_generation_;
    *resume_step = std::max(rollback_step_, step_said_last_);
    return Status::Ok();
  }
  const std::vector<Part>& parts() const override { return parts_; }
  // An elastic job's schedule, as SetSchedule says; a fixed job's otherwise.
  Status Membership(uint64_t step, StepMembership* out) override {
    std::function<StepMembership(uint64_t)> schedule;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      schedule = schedule_;
    }
    if (!schedule) return KVWorker::Membership(step, out);
    *out = schedule(step);
    return Status::Ok();
  }
  void SetSchedule(std::function<StepMembership(uint64_t)> schedule) {
    std::lock_guard<std::mutex> lock(mutex_);
    schedule_ = std::move(schedule);
  }
  int64_t NewestCommonCheckpoint() const override { return newest_common_checkpoint_; }
  void SetNewestCommonCheckpoint(int64_t step) { newest_common_checkpoint_ = step; }
  // As a scheduler whose shards hold every step: the job goes back to the
  // newest held step at or before `start` (FailedPrecondition where none
  // is); first to the steps RecoverToFirst gave, as other recoveries; with
  // FailHeldState, `failure`.
  Status RollBackToHeldState(uint64_t start, const std::vector<uint64_t>& held,
                             uint64_t* resume_step) override {
    std::lock_guard<std::mutex> lock(mutex_);
    held_state_requests_.push_back({start, held});
    if (!held_state_failure_.ok()) return held_state_failure_;
    int64_t newest = -1;
    for (uint64_t step : held) {
      if (step <= start) newest = std::max(newest, static_cast<int64_t>(step));
    }
    if (!other_recoveries_.empty()) {
      newest = static_cast<int64_t>(other_recoveries_.front());
      other_recoveries_.erase(other_recoveries_.begin());
    }
    if (newest < 0) return Status::FailedPrecondition("no held step at or before the start");
    version_ = *resume_step = static_cast<uint64_t>(newest);
    return Status::Ok();
  }
  void FailHeldState(Status failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_state_failure_ = std::move(failure);
  }
  void RecoverToFirst(std::vector<uint64_t> steps) {
    std::lock_guard<std::mutex> lock(mutex_);
    other_recoveries_ = std::move(steps);
  }
  // (start, held) of every RollBackToHeldState.
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> held_state_requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_state_requests_;
  }

  // --- what a test does to it

  // A shard restarted from its checkpoint of `step` holding `values`:
  // tickets not yet waited for, and new ones until Recover, end Aborted.
  void RollBack(uint64_t step, std::vector<std::vector<float>> values) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++announced_generation_;
    rollback_step_ = step;
    rollback_values_ = std::move(values);
  }
  // An async worker's step said last (KVOptions::async): Recover's, where later.
  void SetStepSaidLast(uint64_t step) {
    std::lock_guard<std::mutex> lock(mutex_);
    step_said_last_ = step;
  }
  // The servers are at `version` (a restarted process joins a running job).
  void SetVersion(uint64_t version) {
    std::lock_guard<std::mutex> lock(mutex_);
    version_ = version;
  }
  // While held, new tickets do not complete until Release.
  void Hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    holding_ = true;
  }
  // Returns once a Wait blocks on a held ticket: a test times the wait from
  // here, not from sending it, which reaches the KV client a little later.
  void AwaitBlockedWait() {
    std::unique_lock<std::mutex> lock(mutex_);
    released_.wait(lock, [&] { return blocked_waits_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    holding_ = false;
    ++release_count_;
    released_.notify_all();
  }

  std::vector<std::vector<float>> store() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return store_;
  }
  std::vector<PushRecord> pushes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pushes_;
  }
  std::vector<uint64_t> pull_versions() const {  // min_version of every pull, in order
    std::lock_guard<std::mutex> lock(mutex_);
    return pull_versions_;
  }
  std::vector<std::string> barriers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return barriers_;
  }
  int init_calls() const { return Get(init_calls_); }
  int finish_calls() const { return Get(finish_calls_); }
  int recover_calls() const { return Get(recover_calls_); }
  size_t open_tickets() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tickets_.size();
  }

 private:
  struct Pending {
    std::function<void()> move_data;
    uint64_t generation = 0;
    bool held = false;
    int held_at = 0;
  };

  Ticket NewTicket(std::function<void()> move_data) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pending pending{std::move(move_data), generation_, holding_, release_count_};
    tickets_[next_ticket_] = std::move(pending);
    return next_ticket_++;
  }
  void ApplyPush(const std::vector<const float*>& grads, uint64_t step) {
    std::lock_guard<std::mutex> lock(mutex_);
    PushRecord push;
    push.step = step;
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k]) continue;
      std::vector<float>& value = store_.at(k);
      push.grads[k].assign(grads[k], grads[k] + value.size());
      for (size_t i = 0; i < value.size(); ++i) value[i] -= grads[k][i];
    }
    pushes_.push_back(std::move(push));
    ++version_;
  }
  void CopyOut(const std::vector<float*>& values, uint64_t min_version) {
    std::lock_guard<std::mutex> lock(mutex_);
    pull_versions_.push_back(min_version);
    for (size_t k = 0; k < values.size(); ++k) {
      if (values[k]) std::copy(store_.at(k).begin(), store_.at(k).end(), values[k]);
    }
  }
  int Get(const int& counter) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counter;
  }

  const int rank_, size_;
  std::vector<Part> parts_;
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::vector<std::vector<float>> store_;
  uint64_t version_ = 0;
  uint64_t step_said_last_ = 0;
  std::map<Ticket, Pending> tickets_;
  Ticket next_ticket_ = 1;
  bool holding_ = false;
  int release_count_ = 0;
  int blocked_waits_ = 0;
  uint64_t generation_ = 0, announced_generation_ = 0;
  uint64_t rollback_step_ = 0;
  std::vector<std::vector<float>> rollback_values_;
  std::vector<PushRecord> pushes_;
  std::vector<uint64_t> pull_versions_;
  std::vector<std::string> barriers_;
  std::function<StepMembership(uint64_t)> schedule_;
  std::atomic<int64_t> newest_common_checkpoint_{-1};
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> held_state_requests_;
  Status held_state_failure_ = Status::Ok();
  Status barrier_failure_ = Status::Ok();
  std::vector<uint64_t> other_recoveries_;
  int init_calls_ = 0, finish_calls_ = 0, recover_calls_ = 0;
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_FAKE_KV_WORKER_H_
