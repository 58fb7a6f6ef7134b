// What to do when a replica fails: one function decides for the local
// runner and for the Kubernetes operator, so both behave the same.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_CONTROLLER_RESTART_POLICY_H_
#define KUBEPS_OPERATOR_CONTROLLER_RESTART_POLICY_H_

#include <string>

#include "api/training_job.h"

namespace kubeps::controller {

struct RestartDecision {
  bool restart = false;
  std::string
      code;  // CamelCase: Restarting, RestartPolicyNever, PermanentExitCode, BackoffLimitExceeded
  std::string reason;  // why, in words a user can act on
};

// Exit codes 128 and above mean "killed by a signal" (137 = SIGKILL, 143 =
// SIGTERM): the node, not the program, failed, so ExitCode retries them.
// 1..127 are the program's own verdict and are permanent under ExitCode.
// 0 reaches here only for a server or the scheduler that ended before the
// workers finished without being told the job is over: not a verdict on
// the job, so it is retried too.
bool IsRetryableExitCode(int exit_code);

// A replica's termination reason that no restart cures: the model diverged
// (NonFiniteLoss, NonFiniteGradient), so a rerun from the same parameters
// diverges again; or a server's checkpoint folder takes no more writes
// (CheckpointWriteFailed), and a restart writes into the same one; or a
// worker's data set is not there or not readable (DatasetNotFound,
// DatasetUnreadable): a rerun reads the same folder. The job fails at once,
// whatever the restart policy.
bool IsPermanentReason(const std::string& reason);

// `restarts_so_far` counts the job's restarts, all replicas together, and
// is compared with backoffLimit as Kubeflow's training operator does.
RestartDecision DecideRestart(const api::RunPolicy& policy, const std::string& replica,
                              int exit_code, int restarts_so_far);

// A replica its node refused before it ran (ReplicaStatus::rejected):
// restarted under any restart policy while backoffLimit allows.
RestartDecision DecideRestartAfterRejection(const api::RunPolicy& policy,
                                            const std::string& replica, int restarts_so_far);

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_RESTART_POLICY_H_
