// The CUDA half of gpu_backend.h in a build without CUDA: no devices, and
// every request for one is an error.
#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/cuda/gpu_backend_internal.h"

namespace kubeps::trainer {

int CudaDeviceCount() { return 0; }

bool BuiltWithCuda() { return false; }

namespace internal {

std::unique_ptr<Model> MakeCudaModelOnDevices(const std::string& model, int gpus,
                                              std::string* error) {
  if (error != nullptr) {
    *error = "backend 'cuda' requested for model '" + model + "' but kubeps was built without CUDA";
  }
  return nullptr;
}

}  // namespace internal
}  // namespace kubeps::trainer
