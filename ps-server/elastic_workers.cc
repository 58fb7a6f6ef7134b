#include "ps-server/elastic_workers.h"

#include <algorithm>
#include <limits>

#include "common/membership.h"

namespace kubeps {

ElasticWorkers::ElasticWorkers(const ElasticOptions& options)
    : options_(options), desired_(options.initial_workers) {
  schedule_ = FixedMembership(options.initial_workers, options.global_batch);
  // Until the job starts nothing is fixed: the members are who registered.
  if (options_.elastic) schedule_.set_fixed_below(0);
}

void ElasticWorkers::Start(const std::vector<int>& ranks, uint64_t step, Clock::time_point now) {
  if (!options_.elastic || started_) return;
  started_ = true;
  start_time_ = last_report_ = now;
  start_step_ = furthest_step_ = step;
  schedule_.clear_changes();
  Append(0, ranks);
  schedule_.set_fixed_below(step + kMinLeaseSteps);
}

void ElasticWorkers::KeepGlobalBatch(uint64_t global_batch) {
  schedule_.set_global_batch(static_cast<uint32_t>(global_batch));
}

void ElasticWorkers::Adopt(const v1::Membership& schedule) {
  if (!options_.elastic || schedule.changes_size() == 0) return;
  if (!started_ || NewerMembership(schedule, schedule_)) {
    schedule_ = schedule;
    started_ = true;
    start_time_ = last_report_ = Clock::now();
    start_step_ = furthest_step_ = schedule.fixed_below();
    // Unless told otherwise, the job keeps the workers it has, not the
    // number it started with.
    if (!desired_told_) desired_ = static_cast<int>(Members().size());
  }
}

// The job's global batch is cut over its workers: fewer compute more
// examples each, which a GPU's memory must hold (Kueue admitting 1 of 8
// gives that one 8 times its batch).
std::string ElasticWorkers::ExamplesEach(size_t workers) const {
  const uint64_t batch = schedule_.global_batch();
  if (batch == 0 || workers == 0) return "";
  return ", up to " + std::to_string((batch + workers - 1) / workers) + " of the step's " +
         std::to_string(batch) + " examples each";
}

std::vector<int> ElasticWorkers::Members() const {
  if (schedule_.changes_size() == 0) return {};
  const auto& last = schedule_.changes(schedule_.changes_size() - 1);
  return {last.ranks().begin(), last.ranks().end()};
}

std::vector<int> ElasticWorkers::MembersOfNow() const {
  if (!MembershipKnown(schedule_, furthest_step_)) return Members();
  return MembersAt(schedule_, furthest_step_);
}

std::string ElasticWorkers::SetDesired(int workers, std::optional<uint64_t> at_step) {
  if (workers < options_.min_workers || workers > options_.max_workers) {
    return "the job's workers can be scaled to " + std::to_string(options_.min_workers) + " to " +
           std::to_string(options_.max_workers) + " (elasticPolicy), not " +
           std::to_string(workers);
  }
  if (at_step && *at_step < NextChangeStep()) {
    return "step " + std::to_string(*at_step) + " is too near: the workers of every step below " +
           std::to_string(NextChangeStep()) + " are fixed already";
  }
  desired_ = workers;
  desired_told_ = true;
  at_step_ = at_step;
  return "";
}

void ElasticWorkers::ReportStep(uint64_t step, Clock::time_point now) {
  if (step > furthest_step_) {
    furthest_step_ = step;
    last_report_ = now;
  }
}

uint64_t ElasticWorkers::LeaseSteps(Clock::time_point now) const {
  const double seconds = std::chrono::duration<double>(last_report_ - start_time_).count();
  if (seconds < 0.2) return kMinLeaseSteps;
  const double per_second = static_cast<double>(furthest_step_ - start_step_) / seconds;
  const double ahead = per_second * std::chrono::duration<double>(kLeaseAhead).count();
  return std::max<uint64_t>(kMinLeaseSteps, static_cast<uint64_t>(ahead));
}

std::string ElasticWorkers::Plan(const std::vector<int>& candidates) {
  if (!options_.elastic || !started_) return "";
  const std::vector<int> members = Members();
  const int wanted = std::clamp(desired_, options_.min_workers, options_.max_workers);
  // A step asked for before a restart that the schedule has passed since:
  // as soon as it can, then.
  if (at_step_ && *at_step_ < NextChangeStep()) at_step_.reset();
  // The workers of a job of N are ranks 0..N-1, as its pods are: the ranks
  // past N leave (and the runner or the operator deletes their pods), and
  // only ranks below N are taken in. One that is on its way out is not
  // taken back before it has left: it could leave all the same.
  std::vector<int> next;
  for (int rank : members) {
    if (rank < wanted) next.push_back(rank);
  }
  for (int rank : members) {
    if (rank >= wanted) leaving_.insert(rank);
  }
  for (int rank : candidates) {
    if (static_cast<int>(next.size()) >= wanted) break;
    if (rank < wanted && !leaving_.count(rank) &&
        !std::binary_search(members.begin(), members.end(), rank)) {
      next.push_back(rank);
    }
  }
  std::sort(next.begin(), next.end());
  std::string line;
  // A change asked for at a step waits there for every worker it takes in.
  const bool complete = static_cast<int>(next.size()) == wanted;
  if (next != members && (!at_step_ || complete)) {
    const uint64_t from = at_step_ ? *at_step_ : NextChangeStep();
    Append(from, next);
    at_step_.reset();
    line = "workers from step " + std::to_string(from) + ": " + std::to_string(next.size()) + " (" +
           DescribeMembership(schedule_) + ")" + ExamplesEach(next.size());
  } else if (next == members && complete) {
    at_step_.reset();  // nothing to change: the lease goes on
  }
  uint64_t lease = furthest_step_ + LeaseSteps(Clock::now());
  if (at_step_) lease = std::min(lease, *at_step_);
  if (lease > schedule_.fixed_below()) schedule_.set_fixed_below(lease);
  return line;
}

void ElasticWorkers::Departed(int rank) { leaving_.erase(rank); }

uint64_t ElasticWorkers::NextChangeStep() const {
  // Past the lease, and past a change asked for at a later step: the
  // schedule's changes stay in step order.
  uint64_t from = schedule_.fixed_below();
  if (schedule_.changes_size() > 0) {
    from = std::max(from, schedule_.changes(schedule_.changes_size() - 1).from_step() + 1);
  }
  return from;
}

std::string ElasticWorkers::Rollback(uint64_t step, const std::set<int>& gone) {
  if (!options_.elastic || !started_ || gone.empty()) return "";
  // Needed: a member of a change in force at `step` or later.
  bool needed = false;
  const int changes = schedule_.changes_size();
  for (int i = 0; i < changes; ++i) {
    if (i + 1 < changes && schedule_.changes(i + 1).from_step() <= step) continue;
    for (int rank : schedule_.changes(i).ranks()) needed = needed || gone.count(rank) > 0;
  }
  if (!needed) return "";
  std::vector<int> next;
  for (int rank : Members()) {
    if (!gone.count(rank)) next.push_back(rank);
  }
  for (int rank : gone) leaving_.erase(rank);
  // The steps from `step` on are computed again: their old changes go.
  while (schedule_.changes_size() > 0 &&
         schedule_.changes(schedule_.changes_size() - 1).from_step() >= step) {
    schedule_.mutable_changes()->RemoveLast();
  }
  Append(step, next);
  furthest_step_ = std::max(furthest_step_, step);
  schedule_.set_fixed_below(std::max(schedule_.fixed_below(), step + kMinLeaseSteps));
  return "workers from step " + std::to_string(step) + ": " + std::to_string(next.size()) + " (" +
         DescribeMembership(schedule_) + ")";
}

std::string ElasticWorkers::Drop(const std::set<int>& gone) {
  if (!options_.elastic || !started_) return "";
  std::vector<int> next;
  for (int rank : Members()) {
    if (!gone.count(rank)) next.push_back(rank);
  }
  for (int rank : gone) leaving_.erase(rank);
  const uint64_t from = NextChangeStep();
  Append(from, next);
  return "workers from step " + std::to_string(from) + ": " + std::to_string(next.size()) + " (" +
         DescribeMembership(schedule_) + ")";
}

void ElasticWorkers::Append(uint64_t from_step, const std::vector<int>& ranks) {
  auto* change = schedule_.add_changes();
  change->set_from_step(from_step);
  for (int rank : ranks) change->add_ranks(rank);
  schedule_.set_epoch(schedule_.epoch() + 1);
}

}  // namespace kubeps
