// The CUDA half of gpu_backend.h in a CUDA build.
#include <cuda_runtime.h>

#include <exception>

#include "worker-agent/trainer/cuda/cuda_model.h"
#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/cuda/gpu_backend_internal.h"

namespace kubeps::trainer {

int CudaDeviceCount() {
  int count = 0;
  // Fails without a driver or without devices (cudaErrorNoDevice,
  // cudaErrorInsufficientDriver...): that is 0 devices, not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return count;
}

bool BuiltWithCuda() { return true; }

namespace internal {

std::unique_ptr<Model> MakeCudaModelOnDevices(const std::string& model, int gpus,
                                              std::string* error) {
  try {
    if (gpus == 1) return std::make_unique<CudaModel>(model, 0);
    return std::make_unique<MultiGpuModel>(model, gpus);
  } catch (const std::exception& e) {
    if (error != nullptr) {
      *error = "backend 'cuda': could not set up model '" + model + "' on " + std::to_string(gpus) +
               " GPU(s): " + e.what();
    }
    return nullptr;
  }
}

}  // namespace internal
}  // namespace kubeps::trainer
