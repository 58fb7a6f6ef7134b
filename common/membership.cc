#include "common/membership.h"

#include <algorithm>
#include <limits>

namespace kubeps {
namespace {

// The change in force at `step`: the last one starting at or before it.
const v1::MembershipChange* ChangeAt(const v1::Membership& schedule, uint64_t step) {
  const v1::MembershipChange* found = nullptr;
  for (const auto& change : schedule.changes()) {
    if (change.from_step() > step) break;
    found = &change;
  }
  return found;
}

bool Holds(const v1::MembershipChange& change, int rank) {
  return std::binary_search(change.ranks().begin(), change.ranks().end(), rank);
}

std::string JoinRanks(const v1::MembershipChange& change) {
  std::string out;
  for (int rank : change.ranks()) out += (out.empty() ? "" : ",") + std::to_string(rank);
  return out.empty() ? "none" : out;
}

}  // namespace

v1::Membership FixedMembership(int workers, uint64_t global_batch) {
  v1::Membership schedule;
  schedule.set_epoch(1);
  schedule.set_fixed_below(std::numeric_limits<uint64_t>::max());
  schedule.set_global_batch(static_cast<uint32_t>(global_batch));
  auto* change = schedule.add_changes();
  change->set_from_step(0);
  for (int rank = 0; rank < workers; ++rank) change->add_ranks(rank);
  return schedule;
}

bool MembershipKnown(const v1::Membership& schedule, uint64_t step) {
  return step < schedule.fixed_below() && ChangeAt(schedule, step) != nullptr;
}

std::vector<int> MembersAt(const v1::Membership& schedule, uint64_t step) {
  const v1::MembershipChange* change = ChangeAt(schedule, step);
  if (change == nullptr) return {};
  return {change->ranks().begin(), change->ranks().end()};
}

StepMembership MembershipOf(const v1::Membership& schedule, int rank, uint64_t step) {
  StepMembership out;
  out.global_batch = schedule.global_batch();
  const v1::MembershipChange* change = ChangeAt(schedule, step);
  if (change != nullptr) {
    out.count = change->ranks_size();
    const auto it = std::lower_bound(change->ranks().begin(), change->ranks().end(), rank);
    out.member = it != change->ranks().end() && *it == rank;
    if (out.member) {
      out.position = static_cast<int>(it - change->ranks().begin());
      BatchRun(out.global_batch, out.position, out.count, &out.first_example, &out.end_example);
      return out;
    }
  }
  for (const auto& later : schedule.changes()) {
    if (later.from_step() > step && Holds(later, rank)) {
      out.next_member_step = later.from_step();
      break;
    }
  }
  return out;
}

bool NewerMembership(const v1::Membership& a, const v1::Membership& b) {
  if (a.epoch() != b.epoch()) return a.epoch() > b.epoch();
  return a.fixed_below() > b.fixed_below();
}

std::string DescribeMembership(const v1::Membership& schedule) {
  std::string out;
  for (const auto& change : schedule.changes()) {
    out += (out.empty() ? "" : "; ") + std::string("from step ") +
           std::to_string(change.from_step()) + ": ranks " + JoinRanks(change);
  }
  return out.empty() ? "no members" : out;
}

}  // namespace kubeps
