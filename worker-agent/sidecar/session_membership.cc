// The session's requests about the job's schedule (docs/sidecar-protocol.md):
// `membership` ("Elastic jobs"), which steps this worker computes and which
// of each step's examples are its own, from the scheduler's schedule, and the
// check that an elastic job's program pushes only the steps it computes,
// since the servers count every push of a step toward that step's members;
// `checkpoints` ("Recovery"), how far back a rollback can still go.
#include <algorithm>

#include "common/step_membership.h"
#include "worker-agent/sidecar/request_fields.h"
#include "worker-agent/sidecar/session.h"

namespace kubeps::sidecar {
namespace {

using json = nlohmann::json;

// The steps a session remembers being told it computes, the latest answers:
// a program pushes the step it asked about last (its overlapped buckets; a
// step's last exchange may be sent after the next step was asked about), or,
// after a rollback, the resume step it asks about again; a few are plenty.
constexpr size_t kRememberedMemberSteps = 8;

}  // namespace

Session::Outcome Session::Checkpoints() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::string why = NotReadyForData("checkpoints"); !why.empty())
    return Outcome{kFailedPrecondition, why};
  Outcome ok;
  ok.fields = {{"newest_common_step", context_.kv->NewestCommonCheckpoint()}};
  return ok;
}

std::optional<Session::Outcome> Session::StartMembership(const json& id, const json& request) {
  uint64_t step = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::string why = NotReadyForData("membership"); !why.empty())
      return Outcome{kFailedPrecondition, why};
    Fields fields(request, "membership");
    if (!fields.Unsigned("step", &step, true)) return Outcome{kInvalidArgument, fields.error};
  }
  RunLater(id, [this, step] { return AnswerMembership(step); });
  return std::nullopt;
}

Session::Outcome Session::AnswerMembership(uint64_t step) {
  StepMembership share;
  // Blocks until the scheduler has fixed the step's workers: a round trip
  // at most, since it keeps its schedule ahead of the furthest worker.
  if (Status s = context_.kv->Membership(step, &share); !s.ok())
    return Failed(s, "membership of step " + std::to_string(step) + ": ");
  if (share.global_batch == 0) {
    // A fixed job: every worker computes every step, its rank's run of the
    // batch of spec.batchSize per worker.
    share.global_batch = context_.batch_size * static_cast<uint64_t>(share.count);
    BatchRun(share.global_batch, share.position, share.count, &share.first_example,
             &share.end_example);
  }
  const bool scaled_away =
      !share.member && !share.next_member_step && context_.computed && context_.computed->load();
  Outcome ok;
  ok.fields = {{"member", share.member},
               {"position", share.position},
               {"count", share.count},
               {"first_example", share.first_example},
               {"end_example", share.end_example},
               {"global_batch", share.global_batch},
               {"scaled_away", scaled_away}};
  if (share.next_member_step) ok.fields["next_member_step"] = *share.next_member_step;
  std::lock_guard<std::mutex> lock(mutex_);
  if (share.member) {
    member_steps_.push_back(step);
    if (member_steps_.size() > kRememberedMemberSteps) member_steps_.pop_front();
  }
  if (scaled_away) {
    if (!scaled_away_at_) scaled_away_at_ = step;
  } else {
    scaled_away_at_.reset();  // taken back in (or a rollback redoes its steps)
  }
  return ok;
}

std::string Session::NotAMemberOf(const char* op, uint64_t step) const {
  if (!context_.elastic ||
      std::find(member_steps_.begin(), member_steps_.end(), step) != member_steps_.end())
    return "";
  return std::string(op) + " of step " + std::to_string(step) +
         ": this job's workers change (elasticPolicy), and membership has not said that worker " +
         std::to_string(context_.kv->rank()) +
         " computes that step: ask membership before each step, compute only a step it says "
         "member: true for, and only its examples [first_example, end_example)";
}

}  // namespace kubeps::sidecar
