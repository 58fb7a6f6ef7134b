// KUBEPS_NCCL_CHECK: like KUBEPS_CUDA_CHECK (cuda_check.h) for NCCL calls.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_NCCL_CHECK_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_NCCL_CHECK_H_

#include <nccl.h>

#include <string>

#include "worker-agent/trainer/cuda/cuda_check.h"

namespace kubeps::trainer::cuda {

inline void CheckNccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess) {
    ThrowCallError(call, file, line,
                   "NCCL error " + std::to_string(static_cast<int>(status)) + " (" +
                       ncclGetErrorString(status) + ")");
  }
}

}  // namespace kubeps::trainer::cuda

#define KUBEPS_NCCL_CHECK(call) \
  ::kubeps::trainer::cuda::CheckNccl((call), #call, __FILE__, __LINE__)

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_NCCL_CHECK_H_
