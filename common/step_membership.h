// What one worker does at one step of a job whose workers may change
// (spec.replicaSpecs.worker.elasticPolicy): a plain value, part of the SDK's
// public API (KVWorker::Membership), computed from the scheduler's schedule
// by common/membership.h.
#ifndef KUBEPS_COMMON_STEP_MEMBERSHIP_H_
#define KUBEPS_COMMON_STEP_MEMBERSHIP_H_

#include <cstdint>
#include <optional>

namespace kubeps {

struct StepMembership {
  bool member = false;  // this worker computes a gradient for the step
  int position = 0;     // its place among the step's members, in rank order
  int count = 0;        // the step's members
  // Its examples of the step's global batch: [first_example, end_example),
  // run `position` of the batch cut into `count` runs in rank order, run p
  // being [p*G/count, (p+1)*G/count) with integer division: every example
  // is used once, and runs differ by at most one example.
  uint64_t first_example = 0;
  uint64_t end_example = 0;
  uint64_t global_batch = 0;
  // Not a member: the first later step the schedule makes it one of, if
  // any. None: a worker that computed steps before has been scaled away and
  // leaves the job; one that has not yet waits to be taken in.
  std::optional<uint64_t> next_member_step;
  // Behind the sidecar: not a member, none later, and this worker computed
  // steps before (in any process of its pod): it was scaled away. The
  // in-process client leaves this to its caller, which knows what it computed.
  bool scaled_away = false;

  uint64_t examples() const { return end_example - first_example; }
};

// Run `position` of `count` of a global batch: [p*G/count, (p+1)*G/count).
inline void BatchRun(uint64_t global_batch, int position, int count, uint64_t* first,
                     uint64_t* end) {
  *first = global_batch * position / count;
  *end = global_batch * (position + 1) / count;
}

}  // namespace kubeps

#endif  // KUBEPS_COMMON_STEP_MEMBERSHIP_H_
