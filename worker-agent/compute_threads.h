#ifndef KUBEPS_WORKER_AGENT_COMPUTE_THREADS_H_
#define KUBEPS_WORKER_AGENT_COMPUTE_THREADS_H_

#include "api/pod_env_codec.h"

namespace kubeps {

// How many BLAS and OpenMP threads a worker training a built-in model
// computes on, and why, for its log.
struct ComputeThreads {
  int threads;
  const char* why;
};

// KUBEPS_BLAS_THREADS where it is set; on Kubernetes the cores the
// container requested (KUBEPS_CPU_REQUEST), at most `usable_cores`, and one
// where it requested none: its threads would otherwise count the node's
// cores, and workers sharing a node would oversubscribe it; else (a local
// run) `usable_cores`, the cores this process may use.
ComputeThreads ThreadsToComputeOn(const api::NodeConfig& config, int usable_cores);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_COMPUTE_THREADS_H_
