// `kubeps run`: the embedded default. Runs a TrainingJob on this machine,
// every replica a child process on loopback, driven by the same job
// controller as the Kubernetes operator. A job that brings its own training
// program runs it as a local process beside each worker's agent (the
// container's command, args, env and workingDir; its image is not used).
#ifndef KUBEPS_OPERATOR_LOCAL_LOCAL_RUNNER_H_
#define KUBEPS_OPERATOR_LOCAL_LOCAL_RUNNER_H_

#include <string>

#include "api/training_job.h"

namespace kubeps::local {

struct LocalRunOptions {
  std::string bin_dir;  // where kubeps-server and kubeps-agent are
  std::string run_dir;  // "" = a new folder under $TMPDIR
  int cores = 0;        // 0 = those this process may use (UsableCores); shared out as BLAS threads
  // The folder a job's own program runs in when its container names no
  // workingDir, and what a relative workingDir is relative to: the
  // manifest's folder, so `kubeps run dir/job.yaml` finds dir/train.py
  // from anywhere, as the image's working directory would. "" = the
  // runner's.
  std::string program_dir;
  // A run folder made here (run_dir "") is removed after a successful job
  // unless this is set (`kubeps run --keep-run-dir`); a failed job's is kept.
  bool keep_run_dir = false;
  // The address every replica listens on and reports to the scheduler as its
  // pod IP: a loopback address, 127.0.0.1 or ::1 (IPv6, as on a
  // single-stack IPv6 cluster). `kubeps run --host`.
  std::string host = "127.0.0.1";
};

// Runs the job to its end. Returns the process exit code: 0 on success,
// 1 when the job failed (the reason is printed), 130 when interrupted.
int RunLocally(const api::TrainingJob& job, const LocalRunOptions& options);

}  // namespace kubeps::local

#endif  // KUBEPS_OPERATOR_LOCAL_LOCAL_RUNNER_H_
