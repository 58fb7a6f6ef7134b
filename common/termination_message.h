// A replica's last words: one line "Reason: message" that the job logic reads
// to learn why a replica ended (Kubernetes' terminationMessagePath,
// /dev/termination-log; locally the file KUBEPS_TERMINATION_LOG names).
// The reasons below are the ones the job logic acts on.
//
// Thread-compatible: call it once, as the process ends.
#ifndef KUBEPS_COMMON_TERMINATION_MESSAGE_H_
#define KUBEPS_COMMON_TERMINATION_MESSAGE_H_

#include <string>

#include "common/status.h"

namespace kubeps {

inline constexpr const char* kTerminationLogVariable = "KUBEPS_TERMINATION_LOG";

// A server or the scheduler ending because the scheduler saw every worker
// finish. Any other end of theirs before the workers are done is a failure
// that the run policy restarts: without the reason, an exit 0 of a server
// (a bug, a stray signal handler) would read as "done" and strand the job.
inline constexpr const char* kReasonJobOver = "JobOver";
// The scheduler's end when every worker finished but not every server heard
// so before it gave up waiting (a frozen or cut-off server): the servers
// left will not end on their own, and the job logic stops them at once.
inline constexpr const char* kReasonJobOverUnheard = "JobOverUnheard";

// A worker of an elastic job that left because it was scaled away: done, not
// failed, and started again (a new pod) if the job is scaled up again.
inline constexpr const char* kReasonScaledAway = "ScaledAway";

// Whether a replica's reason says it ended because the job was over.
inline bool IsJobOverReason(const std::string& reason) {
  return reason == kReasonJobOver || reason == kReasonJobOverUnheard;
}
// A server gave up after Shard::kMaxCheckpointFailuresInARow failed
// checkpoint writes (a read-only or full volume): a restart writes into the
// same folder, so the job fails, naming it.
inline constexpr const char* kReasonCheckpointWriteFailed = "CheckpointWriteFailed";
// A starting server could not list its checkpoint folder or read a file in
// it (not a damaged file: those are set aside). It may pass (no free
// descriptor, a network mount that comes back): the server is restarted.
inline constexpr const char* kReasonCheckpointReadFailed = "CheckpointReadFailed";
// Another run's live server holds a starting server's checkpoint folder (two
// jobs given one spec.checkpoint.path) past its grace: a rerun would find it
// there again, or, once that job ended, resume from its checkpoints.
inline constexpr const char* kReasonCheckpointFolderInUse = "CheckpointFolderInUse";
// A job started over checkpoints it cannot resume from, which a restart
// finds again: written by a job unlike it (Shard::FitsThisJob: another
// number of servers, optimizer none against another, async for sync), or
// holding no step that every shard has, or halfway through a reshard.
inline constexpr const char* kReasonCheckpointMismatch = "CheckpointMismatch";
inline constexpr const char* kReasonNoCommonCheckpoint = "NoCommonCheckpoint";
// A server had to roll back but the job keeps no checkpoints
// (spec.checkpoint.path empty): a lost shard's parameters are gone for good.
inline constexpr const char* kReasonShardStateLost = "ShardStateLost";
// The model diverged: a rerun from the same parameters diverges again.
inline constexpr const char* kReasonNonFiniteLoss = "NonFiniteLoss";
inline constexpr const char* kReasonNonFiniteGradient = "NonFiniteGradient";

// A worker's data set folder (spec.dataset.path) is not there, or a file
// in it cannot be read: a rerun reads the same folder, so the job fails,
// naming it.
inline constexpr const char* kReasonDatasetNotFound = "DatasetNotFound";
inline constexpr const char* kReasonDatasetUnreadable = "DatasetUnreadable";
// The other fatal errors of the agent and the servers, each the reason of
// the one line they write before they exit: their configuration (the
// environment, flags, the job) is wrong; they could not join the job
// (register with the scheduler, reach the pod's agent); they cannot listen
// on their port; the scheduler stopped answering; the scheduler
// stopped the job; a recovery failed; training failed.
inline constexpr const char* kReasonInvalidConfig = "InvalidConfig";
inline constexpr const char* kReasonJoinFailed = "JoinFailed";
inline constexpr const char* kReasonListenFailed = "ListenFailed";
inline constexpr const char* kReasonSchedulerUnreachable = "SchedulerUnreachable";
inline constexpr const char* kReasonJobStopped = "JobStopped";
inline constexpr const char* kReasonRecoveryFailed = "RecoveryFailed";
inline constexpr const char* kReasonTrainingFailed = "TrainingFailed";
// A newer process of the same node registered with the scheduler: this one
// was taken for lost (its pod force-deleted from an unreachable node) and
// stops without touching the job's state.
inline constexpr const char* kReasonReplaced = "Replaced";

// How a shard words its refusal (INVALID_ARGUMENT) of a NaN or Inf gradient,
// so that whoever sees it (the built-in training loop, the sidecar serving a
// job's own program) can name the job's failure NonFiniteGradient.
inline constexpr const char* kNonFiniteGradientRefusal = "is not finite (NaN or Inf)";
inline bool IsNonFiniteGradientRefusal(const Status& status) {
  return status.code() == Status::Code::kInvalidArgument &&
         status.message().find(kNonFiniteGradientRefusal) != std::string::npos;
}

// The workers declared other tensors under the same keys (another model, or
// a program changed since the job started): a shard's refusal of an Init
// says so in these words, and a rerun fails the same way.
inline constexpr const char* kReasonModelMismatch = "ModelMismatch";
inline constexpr const char* kModelMismatchRefusal = "the workers run different models";
inline bool IsModelMismatchRefusal(const Status& status) {
  return !status.ok() && status.message().find(kModelMismatchRefusal) != std::string::npos;
}

// A job whose servers only average (optimizer none) started a program past
// step 0 (the job resumed over its checkpoints, or the worker restarted)
// that did not say it puts its own state of that step back: the servers
// hold no parameters, and trained on from fresh values the job would end
// "Succeeded" with a model that never learned. A rerun starts the same way.
inline constexpr const char* kReasonProgramStateMissing = "ProgramStateMissing";

// How a replica words the scheduler's stop of the job, naming the reason
// the scheduler gave, if any.
std::string JobStoppedMessage(const std::string& reason, const std::string& failure);
// The reason a replica that heard the stop ends with: the scheduler's where
// a restart cannot cure it (NoCommonCheckpoint, ProgramStateMissing), so
// that the job fails at once whichever replica's end the job logic hears
// first; else `otherwise`. `said` is the scheduler's reason, as a server's
// beat answer or the KV client's Status::reason carries it.
const char* JobStopReason(const std::string& said, const char* otherwise);
// The reason a worker ends with, having heard `said`: JobStopReason's; or
// its own end where the scheduler refused its registration (JoinFailed) or
// a newer process of it registered (Replaced): a restart of the job cures
// neither, and neither is the job's failure; else `otherwise`.
const char* EndReason(const std::string& said, const char* otherwise);
// Whether `reason` is a node's own end (JoinFailed, Replaced), which the
// node words as such, not as the scheduler's stop of the job.
bool IsOwnEnd(const std::string& reason);

// Where a replica's last words go: $KUBEPS_TERMINATION_LOG where it is set
// (the local runner names a file per replica); else `pod_default` where this
// process runs in a pod (the kubelet sets KUBERNETES_SERVICE_HOST in every
// container, and makes the file) and the file exists; else "": nobody would
// read them. A process run by hand on a host where something made
// /dev/termination-log (a stand-in kubelet's mount point) writes nothing.
std::string TerminationLogPath(const char* pod_default = "/dev/termination-log");

// Writes "reason: message" to TerminationLogPath(), if any. Best effort: a
// process that cannot write it still ends with its exit code.
void WriteTerminationMessage(const std::string& reason, const std::string& message);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_TERMINATION_MESSAGE_H_
