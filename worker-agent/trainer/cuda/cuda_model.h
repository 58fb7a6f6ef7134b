// The built-in models on CUDA GPUs (only in builds with KUBEPS_HAVE_CUDA=1;
// most code should go through MakeModelForBackend in gpu_backend.h).
// Host-only header: the CUDA state sits behind forward declarations.
//
// CudaModel is "softmax", "mlp" or "cnn" on one device; MultiGpuModel is the
// same model data-parallel over devices 0..G-1 of one process (MXNet's
// dist_sync_device): each replica takes a slice of the batch and the
// gradients are summed with NCCL before the parameter servers see them.
//
// Both keep the Model contract and the CPU models' layouts (models.h):
// same parameter names, shapes and order, same Initialize(seed) values, and
// the same loss and gradients within float tolerance. The parameters live
// on the device(s); parameters() holds the host copies the PS client uses,
// synchronised on every call:
//   - before ForwardBackward / Predict / ForwardLoss, every `value` is
//     copied host -> device (the client writes the pulled parameters there);
//   - after ForwardBackward, the gradients are copied device -> host into
//     `grad` (the client pushes from host memory).
// Both copies go through one page-locked staging buffer each, so they are
// single DMA transfers; a later zero-copy path could let the client read
// and write that pinned memory directly.
//
// Errors (CUDA, cuBLAS, NCCL) throw std::runtime_error naming the failed call.
// Not thread-safe, like the CPU models.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_MODEL_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker-agent/trainer/model.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace kubeps::trainer {
namespace cuda {
class DeviceNet;
template <typename T>
class PinnedBuffer;
}  // namespace cuda

class CudaModel : public Model {
 public:
  // `model`: "softmax", "mlp" or "cnn"; `device`: a CUDA device id. Throws
  // std::invalid_argument for an unknown model, std::runtime_error on CUDA
  // errors. Parameters start at zero, as with MakeModel().
  CudaModel(const std::string& model, int device);
  ~CudaModel() override;

  // Same values as the CPU model's Initialize(seed).
  void Initialize(uint64_t seed) override;
  float ForwardBackward(const float* images, const uint8_t* labels, int batch) override;
  void Predict(const float* images, int batch, uint8_t* predictions) override;
  float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                    uint8_t* predictions) override;

  const std::string& model_name() const { return model_; }
  int device() const;
  // The device engine (device_net.h); MultiGpuModel drives its replicas
  // through it.
  cuda::DeviceNet& net() { return *net_; }

 private:
  std::string model_;
  std::unique_ptr<cuda::DeviceNet> net_;
  std::unique_ptr<cuda::PinnedBuffer<float>> staged_values_, staged_grads_;
};

class MultiGpuModel : public Model {
 public:
  // Replicas of `model` on devices 0..gpus-1 (gpus >= 1, at most the
  // number of visible devices; one NCCL communicator per device when
  // gpus > 1). Throws like CudaModel.
  MultiGpuModel(const std::string& model, int gpus);
  ~MultiGpuModel() override;

  void Initialize(uint64_t seed) override;
  // Splits the batch into gpus contiguous slices (sizes differ by at most
  // one; a replica may get none when batch < gpus). Each replica scales its
  // loss gradient by 1/batch, so the NCCL sum over replicas is exactly the
  // gradient of the mean loss over the whole batch, whatever the slice
  // sizes. The summed gradient is copied to `grad` once, from device 0.
  float ForwardBackward(const float* images, const uint8_t* labels, int batch) override;
  void Predict(const float* images, int batch, uint8_t* predictions) override;
  float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                    uint8_t* predictions) override;

  int gpus() const { return static_cast<int>(replicas_.size()); }

 private:
  // Examples [start(g), start(g) + count(g)) go to replica g.
  static int SliceStart(int batch, int gpus, int g);
  // Stages `value` once and uploads it to every replica (the broadcast of
  // the pulled parameters).
  void UploadToAll();
  // Runs forward (+ loss when labels, + argmax when predictions) on every
  // replica with examples; returns the summed per-example loss.
  double ForwardAll(const float* images, const uint8_t* labels, int batch, uint8_t* predictions);

  std::string model_;
  std::vector<std::unique_ptr<CudaModel>> replicas_;
  std::vector<ncclComm*> comms_;  // one per replica; empty when gpus == 1
  std::unique_ptr<cuda::PinnedBuffer<float>> staged_values_, staged_grads_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_MODEL_H_
