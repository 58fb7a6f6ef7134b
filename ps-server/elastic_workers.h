// The scheduler's plan of which workers compute which step of an elastic
// job (spec.replicaSpecs.worker.elasticPolicy), kept as the membership
// schedule of common/membership.h.
//
// A change of membership takes effect at a step boundary no worker has
// reached: the schedule is fixed below `fixed_below`, a lease the
// scheduler extends, a fifth of a second of steps ahead of the furthest worker,
// as workers report their steps in their heartbeats. A worker never starts
// a step past the lease (it asks again at once), so a change the scheduler
// appends at `fixed_below` reaches every worker and, through the pushes'
// contributor counts, every shard, before anyone computes that step.
//   - Scale down to N: the ranks from N on leave at the change (a job's
//     ranks are its pods' indices); each leaves once it has pushed its last step.
//   - Scale up: a worker below N that registered and beats, and is not a
//     member, joins at the next change; it pulls that step's parameters.
//   - A member silent for replace_timeout is dropped through a recovery:
//     every shard rolls back to the newest common checkpoint, and the
//     schedule from that step on names the workers still there (async jobs:
//     at the lease's end, nothing recomputed). Below minReplicas the job
//     fails instead, saying why.
// In async jobs each worker counts its own steps, so a change reaches each
// worker at its own step of that number: workers join and leave at any time.
// Not thread-safe: the scheduler calls it under its lock.
#ifndef KUBEPS_PS_SERVER_ELASTIC_WORKERS_H_
#define KUBEPS_PS_SERVER_ELASTIC_WORKERS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kubeps.pb.h"

namespace kubeps {

struct ElasticOptions {
  bool elastic = false;  // false: the workers are fixed, the schedule one change for ever
  int initial_workers = 1;
  int min_workers = 1;
  int max_workers = 1;  // ranks 0..max_workers-1
  uint64_t global_batch = 0;
  int replace_timeout_ms = 60000;
};

class ElasticWorkers {
 public:
  using Clock = std::chrono::steady_clock;
  // How far ahead of the furthest worker the lease reaches: this many steps
  // at least, and about kLeaseAhead of its recent pace.
  static constexpr uint64_t kMinLeaseSteps = 8;
  static constexpr std::chrono::milliseconds kLeaseAhead{200};

  explicit ElasticWorkers(const ElasticOptions& options);

  bool elastic() const { return options_.elastic; }
  bool started() const { return started_; }  // by Start, or a schedule adopted
  // The job starts with these ranks at `step` (0, or the step it resumes from).
  void Start(const std::vector<int>& ranks, uint64_t step, Clock::time_point now);
  // A job started again over an elastic job's checkpoints keeps that job's
  // global batch, cut over the workers it has now: its data goes on where
  // it stopped. Before Start.
  void KeepGlobalBatch(uint64_t global_batch);
  // A node registering again with a restarted scheduler brings its schedule.
  void Adopt(const v1::Membership& schedule);
  const v1::Membership& schedule() const { return schedule_; }
  // The members of the newest change: who trains once the pending steps are done.
  std::vector<int> Members() const;
  // Who computes the furthest step a worker said it is about to compute:
  // the members of now, not those of a change the lease has not reached.
  std::vector<int> MembersOfNow() const;
  // ", up to 64 of the step's 128 examples each" for a step of `workers`.
  std::string ExamplesEach(size_t workers) const;

  int desired() const { return desired_; }
  // "" or why `workers` is refused (outside [min, max]). With `at_step`,
  // the change is made at that step exactly, once the workers to take in
  // are there: the lease stops at it until then, so the job waits there.
  // A step the lease has passed already is refused.
  std::string SetDesired(int workers, std::optional<uint64_t> at_step = std::nullopt);

  // A worker beat, about to compute `step`.
  void ReportStep(uint64_t step, Clock::time_point now);
  // Appends a change when the members differ from the desired number and
  // workers are there to join (`candidates`: registered, beating, not
  // members, ascending), then extends the lease. Returns a line for the log
  // when the schedule changed, else "".
  std::string Plan(const std::vector<int>& candidates);
  // A recovery rolls the job back to `step`, with `gone` no longer there to
  // redo its steps: from `step` on the schedule names the members without
  // them (unchanged when none of them is needed from `step` on). Returns a
  // line for the log when the schedule changed.
  std::string Rollback(uint64_t step, const std::set<int>& gone);
  // Async jobs: `gone` leave at the lease's end, no step being recomputed.
  std::string Drop(const std::set<int>& gone);
  // A worker taken out has left (or a new process registered in its rank):
  // its rank may be taken in again.
  void Departed(int rank);

 private:
  void Append(uint64_t from_step, const std::vector<int>& ranks);
  // Where the next change may start: the lease's end, or past the last change.
  uint64_t NextChangeStep() const;
  uint64_t LeaseSteps(Clock::time_point now) const;

  const ElasticOptions options_;
  v1::Membership schedule_;
  int desired_;
  bool desired_told_ = false;  // SetDesired was called: an adopted schedule does not override it
  std::optional<uint64_t> at_step_;  // the pending change's step, where one was asked for
  std::set<int> leaving_;            // taken out, not yet gone: not taken back in
  bool started_ = false;
  Clock::time_point start_time_;
  uint64_t start_step_ = 0;
  uint64_t furthest_step_ = 0;
  Clock::time_point last_report_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_ELASTIC_WORKERS_H_
