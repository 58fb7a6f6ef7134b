// Backend selection; the same code in CUDA and CPU-only builds.
#include "worker-agent/trainer/cuda/gpu_backend.h"

#include <algorithm>

#include "worker-agent/trainer/cuda/gpu_backend_internal.h"

namespace kubeps::trainer {
namespace {

std::unique_ptr<Model> Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return nullptr;
}

std::string JoinedModelNames() {
  std::string out;
  const std::vector<std::string>& names = ModelNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

std::unique_ptr<Model> MakeModelForBackend(const std::string& model, const std::string& backend,
                                           int gpus, std::string* error) {
  const std::vector<std::string>& names = ModelNames();
  if (std::find(names.begin(), names.end(), model) == names.end()) {
    return Fail(error, "unknown model '" + model + "' (expected " + JoinedModelNames() + ")");
  }
  if (backend != "cpu" && backend != "cuda" && backend != "auto") {
    return Fail(error, "unknown backend '" + backend + "' (expected cpu, cuda or auto)");
  }
  if (backend == "cpu") return MakeModel(model);

  if (gpus < 0) {
    return Fail(error, "backend '" + backend + "': gpus must be >= 1, got " + std::to_string(gpus));
  }
  const int wanted = std::max(gpus, 1);
  const int devices = CudaDeviceCount();
  if (backend == "auto" && devices == 0) return MakeModel(model);

  // backend == "cuda", or "auto" with at least one device.
  if (!BuiltWithCuda()) {
    return Fail(error,
                "backend 'cuda' requested but kubeps was built without CUDA "
                "(0 CUDA devices usable)");
  }
  if (devices < wanted) {
    return Fail(error, "backend '" + backend + "' requested with gpus=" + std::to_string(wanted) +
                           " but " + std::to_string(devices) + " CUDA device(s) are visible");
  }
  return internal::MakeCudaModelOnDevices(model, wanted, error);
}

}  // namespace kubeps::trainer
