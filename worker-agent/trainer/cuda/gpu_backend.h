// Choosing where a worker trains: on the CPU (the models of models.h) or on
// CUDA GPUs (cuda_model.h). Host-only C++: no CUDA header is included, and the
// API exists in every build; a build without CUDA reports 0 devices and
// refuses the "cuda" backend with an error.
//
// The GPU models keep the Model contract exactly: parameters() are host
// vectors in key order, `value` is read before every step (the parameter-
// server client pulls into it) and `grad` is written after every
// ForwardBackward (the client pushes it), with the same layouts, the same
// Initialize(seed) values and, within float tolerance, the same losses and
// gradients as the CPU model of the same name.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_H_

#include <memory>
#include <string>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {

// Number of visible CUDA devices (0 without CUDA support or without GPUs).
int CudaDeviceCount();

// "cpu", "cuda" or "auto" (auto = cuda when a device exists, else cpu).
// Returns a Model that trains on `gpus` devices (gpus >= 1; 0 means 1) when
// the backend resolves to cuda: a CudaModel on device 0 for one GPU, a
// MultiGpuModel on devices 0..gpus-1 (NCCL allreduce) for more. Returns the
// CPU model (MakeModel) otherwise, whatever `gpus` says. On failure returns
// nullptr and sets *error (when not null) to a message naming the problem:
// unknown backend or model, cuda asked but built without CUDA, fewer
// devices than gpus, a CUDA error while setting the devices up.
std::unique_ptr<Model> MakeModelForBackend(const std::string& model, const std::string& backend,
                                           int gpus, std::string* error);

// Whether this build contains the CUDA backend (KUBEPS_HAVE_CUDA).
bool BuiltWithCuda();

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_GPU_BACKEND_H_
