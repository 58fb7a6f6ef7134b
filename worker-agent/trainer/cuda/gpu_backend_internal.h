// The seam between gpu_backend.cc (backend selection, in every build) and
// the part that differs: cuda_backend.cc in a CUDA build, gpu_backend_stub.cc
// otherwise. Not for use outside this folder and its tests.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_INTERNAL_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_INTERNAL_H_

#include <memory>
#include <string>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer::internal {

// `model` is a valid model name and 1 <= gpus <= CudaDeviceCount(). Returns
// the CUDA model, or nullptr with *error set (never throws).
std::unique_ptr<Model> MakeCudaModelOnDevices(const std::string& model, int gpus,
                                              std::string* error);

}  // namespace kubeps::trainer::internal

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_INTERNAL_H_
