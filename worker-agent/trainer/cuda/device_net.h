// DeviceNet: one built-in model ("softmax", "mlp", "cnn") on one CUDA device,
// with its parameters and gradients in device memory and the activations of
// the last batch. It is the engine of CudaModel (one device) and of each
// replica of MultiGpuModel; the host side (parameters(), the PS client)
// lives there.
//
// Parameters are two flat device arrays, values and grads, holding the
// tensors in key order back to back (offset(i) is where tensor i starts),
// so one copy moves all values in and all gradients out, and one NCCL call
// reduces every gradient.
//
// Everything runs on the net's own stream and is only enqueued; Finish()
// waits for the stream. A step is
//   UploadValues, Stage, Forward, Backward (or Loss / Argmax), [DownloadGrads], Finish.
// Not thread-safe; methods make the net's device current themselves.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_NET_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_NET_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker-agent/trainer/cuda/cuda_check.h"
#include "worker-agent/trainer/model.h"

namespace kubeps::trainer::cuda {

class DeviceNet {
 public:
  // `layout`: the model's parameters (only names and sizes are used), as the
  // CPU model of the same name has them. Throws on an unknown model or a
  // CUDA error.
  DeviceNet(const std::string& model, int device, const std::vector<Parameter>& layout);
  ~DeviceNet();
  DeviceNet(const DeviceNet&) = delete;
  DeviceNet& operator=(const DeviceNet&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  size_t param_count() const { return total_; }  // floats over all tensors
  size_t param_tensors() const { return offsets_.size() - 1; }
  size_t offset(size_t i) const { return offsets_[i]; }
  size_t size(size_t i) const { return offsets_[i + 1] - offsets_[i]; }
  float* values() const { return values_.get(); }  // device, param_count()
  float* grads() const { return grads_.get(); }    // device, param_count()

  // Copies param_count() floats from `staged` (pinned host memory, which
  // must stay untouched until Finish) to the device values.
  void UploadValues(const float* staged);
  // Copies the device grads to `staged` (pinned, valid after Finish).
  void DownloadGrads(float* staged);
  // Sets every gradient to 0 (a replica with no examples in a step).
  void ZeroGrads();

  // Copies a batch to the device: images batch x 784, labels (may be null
  // when only predicting) batch ids < 10, checked here. Waits for the
  // previous step first, so the staging buffers are free.
  void Stage(const float* images, const uint8_t* labels, int batch);

  // Forward pass of the staged batch up to the logits.
  void Forward();
  // Loss of every example, and the backward pass: grads = grad_scale * sum
  // over the staged examples of the gradient of their loss. (1/batch gives
  // the gradient of the mean; MultiGpuModel passes 1/(whole batch) so that
  // the sum over replicas is the gradient of the mean over all of them.)
  void Backward(float grad_scale);
  // Loss of every example only (no gradients).
  void Loss();
  // Predicted class of every example.
  void Argmax();

  // Waits for the stream. Returns the sum of the per-example losses when
  // Backward or Loss ran in this step (else 0) and writes the predictions
  // (batch of them) to `predictions` when Argmax ran and it is not null.
  double Finish(uint8_t* predictions);

 private:
  enum class Arch { kSoftmax, kMlp, kCnn };

  // Restores the current device when destroyed (see ~DeviceNet).
  struct RestoreDevice {
    int previous = -1;
    ~RestoreDevice() {
      if (previous >= 0) cudaSetDevice(previous);
    }
  };

  float* Value(size_t i) const { return values_.get() + offsets_[i]; }
  float* Grad(size_t i) const { return grads_.get() + offsets_[i]; }
  void EnsureActivations(int batch);

  RestoreDevice restore_;  // first member: destroyed last
  Arch arch_;
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<size_t> offsets_;  // tensor i is [offsets_[i], offsets_[i+1])
  size_t total_ = 0;
  DeviceBuffer<float> values_, grads_;

  int batch_ = 0;
  bool loss_pending_ = false, predictions_pending_ = false;
  PinnedBuffer<float> staged_images_;
  PinnedBuffer<uint8_t> staged_labels_, staged_predictions_;
  PinnedBuffer<double> staged_loss_;
  DeviceBuffer<float> images_;
  DeviceBuffer<uint8_t> labels_, predictions_;
  DeviceBuffer<double> row_loss_;

  // Activations and their gradients (the ones a model does not use stay
  // empty). cnn: conv1 -> pool1 -> conv2 -> pool2 -> flat -> hidden -> logits;
  // mlp: images -> hidden -> logits; softmax: images -> logits.
  DeviceBuffer<float> col1_, conv1_, pool1_, col2_, conv2_, pool2_, flat_;
  DeviceBuffer<uint8_t> arg1_, arg2_;
  DeviceBuffer<float> hidden_, logits_;
  DeviceBuffer<float> dlogits_, dhidden_, dflat_, dpool2_, dconv2_, dpool1_, dconv1_;
};

// Host-side parameter staging shared by the models: copies all `value`
// vectors, back to back in key order, into `staged` (throws
// std::invalid_argument if one does not have the size `net` expects), and
// `staged` back into the `grad` vectors (resized to match).
void PackValues(const std::vector<Parameter>& params, const DeviceNet& net, float* staged);
void UnpackGrads(const float* staged, const DeviceNet& net, std::vector<Parameter>& params);

}  // namespace kubeps::trainer::cuda

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_NET_H_
