#ifndef KUBEPS_API_COMPUTE_THREADS_H_
#define KUBEPS_API_COMPUTE_THREADS_H_

#include <string>

#include "api/pod_env_codec.h"

namespace kubeps {

// How many threads a replica computes on, and why, for its log: a worker
// training a built-in model, its BLAS and OpenMP threads; a parameter
// server, the threads one big part's update is split over.
struct ComputeThreads {
  int threads;
  const char* why;
};

// KUBEPS_BLAS_THREADS where it is set; on Kubernetes the cores the
// container requested (KUBEPS_CPU_REQUEST), at most `usable_cores`, and one
// where it requested none: its threads would otherwise count the node's
// cores, and replicas sharing a node would oversubscribe it; else (a local
// run) `usable_cores`, the cores this process may use.
ComputeThreads ThreadsToComputeOn(const api::NodeConfig& config, int usable_cores);

// "2 threads (why)", for the line each replica logs at start.
std::string Describe(const ComputeThreads& given);

}  // namespace kubeps

#endif  // KUBEPS_API_COMPUTE_THREADS_H_
