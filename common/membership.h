// The membership schedule of a job's workers (v1::Membership): which ranks
// compute which step. The scheduler writes it (ps-server/elastic_workers.h),
// heartbeats carry it to the workers, and each worker reads from it its
// part of every step: whether it computes the step and which examples of
// the step's global batch are its own. Pure functions: safe from any thread.
#ifndef KUBEPS_COMMON_MEMBERSHIP_H_
#define KUBEPS_COMMON_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/step_membership.h"
#include "kubeps.pb.h"

namespace kubeps {

// A job whose `workers` are fixed: ranks 0..workers-1 from step 0, for ever.
v1::Membership FixedMembership(int workers, uint64_t global_batch);

// Whether the schedule says who computes `step` (step < fixed_below).
bool MembershipKnown(const v1::Membership& schedule, uint64_t step);

// The ranks that compute `step`, ascending; REQUIRES: MembershipKnown.
std::vector<int> MembersAt(const v1::Membership& schedule, uint64_t step);

// What worker `rank` does at `step`; REQUIRES: MembershipKnown.
StepMembership MembershipOf(const v1::Membership& schedule, int rank, uint64_t step);

// Whether `a` is a newer schedule than `b`: a later epoch, or the same one
// fixed further.
bool NewerMembership(const v1::Membership& a, const v1::Membership& b);

// "from step 0: ranks 0,1; from step 120: ranks 0", for logs and messages.
std::string DescribeMembership(const v1::Membership& schedule);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_MEMBERSHIP_H_
