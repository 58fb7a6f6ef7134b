#include "api/compute_threads.h"

#include <algorithm>

namespace kubeps {

ComputeThreads ThreadsToComputeOn(const api::NodeConfig& config, int usable_cores) {
  if (config.blas_threads > 0) return {config.blas_threads, "KUBEPS_BLAS_THREADS"};
  if (config.cpu_request == 0) return {1, "the container requested no CPU"};
  if (config.cpu_request > 0)
    return {std::min(config.cpu_request, usable_cores), "the container's CPU request"};
  return {usable_cores, "the cores this process may use"};
}

std::string Describe(const ComputeThreads& given) {
  return std::to_string(given.threads) + (given.threads == 1 ? " thread (" : " threads (") +
         given.why + ")";
}

}  // namespace kubeps
