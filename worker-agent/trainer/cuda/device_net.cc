#include "worker-agent/trainer/cuda/device_net.h"

#include <cstring>
#include <stdexcept>

#include "worker-agent/trainer/cuda/device_ops.h"
#include "worker-agent/trainer/cuda/kernels.h"

namespace kubeps::trainer::cuda {
namespace {

constexpr int kImage = 28 * 28;
constexpr int kClasses = 10;
constexpr int kMlpHidden = 256;
constexpr int kCnnHidden = 1024;
constexpr int kFlat = 64 * 7 * 7;

}  // namespace

DeviceNet::DeviceNet(const std::string& model, int device, const std::vector<Parameter>& layout)
    : device_(device) {
  if (model == "softmax") {
    arch_ = Arch::kSoftmax;
  } else if (model == "mlp") {
    arch_ = Arch::kMlp;
  } else if (model == "cnn") {
    arch_ = Arch::kCnn;
  } else {
    throw std::invalid_argument("DeviceNet: unknown model '" + model + "'");
  }
  const size_t expected_tensors = arch_ == Arch::kSoftmax ? 2 : arch_ == Arch::kMlp ? 4 : 8;
  if (layout.size() != expected_tensors) {
    throw std::invalid_argument("DeviceNet: model '" + model + "' expects " +
                                std::to_string(expected_tensors) + " parameter tensors, got " +
                                std::to_string(layout.size()));
  }
  offsets_.push_back(0);
  for (const Parameter& p : layout) offsets_.push_back(offsets_.back() + p.value.size());
  total_ = offsets_.back();

  DeviceGuard guard(device_);
  KUBEPS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KUBEPS_CUBLAS_CHECK(cublasCreate(&blas_));
  KUBEPS_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // Plain FP32 products (no TF32 tensor-core rounding), so results match the
  // CPU model within float tolerance. (The NVIDIA_TF32_OVERRIDE environment
  // variable could still force TF32.)
  KUBEPS_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  values_.Ensure(total_);
  grads_.Ensure(total_);
  KUBEPS_CUDA_CHECK(cudaMemsetAsync(values_.get(), 0, total_ * sizeof(float), stream_));
  KUBEPS_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, total_ * sizeof(float), stream_));
  KUBEPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

DeviceNet::~DeviceNet() {
  // Best effort: a destructor does not throw. The device stays current
  // after this body, while the members free their memory; restore_, the
  // first member and so the last destroyed, then restores the caller's.
  cudaGetDevice(&restore_.previous);
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void DeviceNet::UploadValues(const float* staged) {
  DeviceGuard guard(device_);
  KUBEPS_CUDA_CHECK(cudaMemcpyAsync(values_.get(), staged, total_ * sizeof(float),
                                    cudaMemcpyHostToDevice, stream_));
}

void DeviceNet::DownloadGrads(float* staged) {
  DeviceGuard guard(device_);
  KUBEPS_CUDA_CHECK(cudaMemcpyAsync(staged, grads_.get(), total_ * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
}

void DeviceNet::ZeroGrads() {
  DeviceGuard guard(device_);
  KUBEPS_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, total_ * sizeof(float), stream_));
}

void DeviceNet::EnsureActivations(int batch) {
  const size_t n = static_cast<size_t>(batch);
  images_.Ensure(n * kImage);
  labels_.Ensure(n);
  predictions_.Ensure(n);
  row_loss_.Ensure(n);
  logits_.Ensure(n * kClasses);
  dlogits_.Ensure(n * kClasses);
  if (arch_ == Arch::kMlp) {
    hidden_.Ensure(n * kMlpHidden);
    dhidden_.Ensure(n * kMlpHidden);
  } else if (arch_ == Arch::kCnn) {
    col1_.Ensure(25 * n * 28 * 28);
    conv1_.Ensure(32 * n * 28 * 28);
    pool1_.Ensure(32 * n * 14 * 14);
    arg1_.Ensure(32 * n * 14 * 14);
    col2_.Ensure(32 * 25 * n * 14 * 14);
    conv2_.Ensure(64 * n * 14 * 14);
    pool2_.Ensure(64 * n * 7 * 7);
    arg2_.Ensure(64 * n * 7 * 7);
    flat_.Ensure(n * kFlat);
    hidden_.Ensure(n * kCnnHidden);
    dhidden_.Ensure(n * kCnnHidden);
    dflat_.Ensure(n * kFlat);
    dpool2_.Ensure(64 * n * 7 * 7);
    dconv2_.Ensure(64 * n * 14 * 14);
    dpool1_.Ensure(32 * n * 14 * 14);
    dconv1_.Ensure(32 * n * 28 * 28);
  }
}

void DeviceNet::Stage(const float* images, const uint8_t* labels, int batch) {
  if (batch <= 0) throw std::invalid_argument("DeviceNet::Stage: batch must be > 0");
  DeviceGuard guard(device_);
  // The previous step's copies may still read the staging buffers.
  KUBEPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  batch_ = batch;
  loss_pending_ = predictions_pending_ = false;
  EnsureActivations(batch);
  const size_t n = static_cast<size_t>(batch);
  float* host_images = staged_images_.Ensure(n * kImage);
  std::memcpy(host_images, images, n * kImage * sizeof(float));
  KUBEPS_CUDA_CHECK(cudaMemcpyAsync(images_.get(), host_images, n * kImage * sizeof(float),
                                    cudaMemcpyHostToDevice, stream_));
  if (labels != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      if (labels[i] >= kClasses) {
        throw std::invalid_argument("DeviceNet::Stage: label " + std::to_string(labels[i]) +
                                    " of example " + std::to_string(i) + " is not < 10");
      }
    }
    uint8_t* host_labels = staged_labels_.Ensure(n);
    std::memcpy(host_labels, labels, n);
    KUBEPS_CUDA_CHECK(
        cudaMemcpyAsync(labels_.get(), host_labels, n, cudaMemcpyHostToDevice, stream_));
  }
}

void DeviceNet::Forward() {
  DeviceGuard guard(device_);
  const int n = batch_;
  cudaStream_t s = stream_;
  switch (arch_) {
    case Arch::kSoftmax:
      DenseForward(blas_, s, images_.get(), Value(0), Value(1), n, kImage, kClasses, logits_.get());
      break;
    case Arch::kMlp:
      DenseForward(blas_, s, images_.get(), Value(0), Value(1), n, kImage, kMlpHidden,
                   hidden_.get());
      ReluForward(hidden_.get(), static_cast<size_t>(n) * kMlpHidden, s);
      DenseForward(blas_, s, hidden_.get(), Value(2), Value(3), n, kMlpHidden, kClasses,
                   logits_.get());
      break;
    case Arch::kCnn: {
      // As CnnModel::Forward: the images (batch x 784) already are CNHW with
      // one channel; ReLU runs after each pool (they commute).
      const size_t planes1 = 32 * static_cast<size_t>(n), planes2 = 64 * static_cast<size_t>(n);
      ConvForward(blas_, s, images_.get(), Value(0), Value(1), n, 28, 28, 1, 32, 5, col1_.get(),
                  conv1_.get());
      MaxPoolForward(conv1_.get(), planes1, 28, 28, pool1_.get(), arg1_.get(), s);
      ReluForward(pool1_.get(), planes1 * 14 * 14, s);
      ConvForward(blas_, s, pool1_.get(), Value(2), Value(3), n, 14, 14, 32, 64, 5, col2_.get(),
                  conv2_.get());
      MaxPoolForward(conv2_.get(), planes2, 14, 14, pool2_.get(), arg2_.get(), s);
      ReluForward(pool2_.get(), planes2 * 7 * 7, s);
      // 64 x batch x 49 (CNHW) -> batch x 3136, feature c*49 + h*7 + w.
      CnhwToRows(pool2_.get(), 64, n, 49, flat_.get(), s);
      DenseForward(blas_, s, flat_.get(), Value(4), Value(5), n, kFlat, kCnnHidden, hidden_.get());
      ReluForward(hidden_.get(), static_cast<size_t>(n) * kCnnHidden, s);
      DenseForward(blas_, s, hidden_.get(), Value(6), Value(7), n, kCnnHidden, kClasses,
                   logits_.get());
      break;
    }
  }
}

void DeviceNet::Backward(float grad_scale) {
  DeviceGuard guard(device_);
  const int n = batch_;
  cudaStream_t s = stream_;
  SoftmaxCrossEntropy(logits_.get(), labels_.get(), n, kClasses, grad_scale, row_loss_.get(),
                      dlogits_.get(), s);
  loss_pending_ = true;
  switch (arch_) {
    case Arch::kSoftmax:
      DenseBackward(blas_, s, images_.get(), Value(0), dlogits_.get(), n, kImage, kClasses, Grad(0),
                    Grad(1), nullptr);
      break;
    case Arch::kMlp:
      DenseBackward(blas_, s, hidden_.get(), Value(2), dlogits_.get(), n, kMlpHidden, kClasses,
                    Grad(2), Grad(3), dhidden_.get());
      ReluBackward(hidden_.get(), dhidden_.get(), static_cast<size_t>(n) * kMlpHidden, s);
      DenseBackward(blas_, s, images_.get(), Value(0), dhidden_.get(), n, kImage, kMlpHidden,
                    Grad(0), Grad(1), nullptr);
      break;
    case Arch::kCnn: {
      // As CnnModel::ForwardBackward.
      const size_t planes1 = 32 * static_cast<size_t>(n), planes2 = 64 * static_cast<size_t>(n);
      DenseBackward(blas_, s, hidden_.get(), Value(6), dlogits_.get(), n, kCnnHidden, kClasses,
                    Grad(6), Grad(7), dhidden_.get());
      ReluBackward(hidden_.get(), dhidden_.get(), static_cast<size_t>(n) * kCnnHidden, s);
      DenseBackward(blas_, s, flat_.get(), Value(4), dhidden_.get(), n, kFlat, kCnnHidden, Grad(4),
                    Grad(5), dflat_.get());
      RowsToCnhw(dflat_.get(), 64, n, 49, dpool2_.get(), s);
      // Masking the pooled gradient by the pooled ReLU output is the ReLU
      // backward of the conv output (see CnnModel::ForwardBackward).
      ReluBackward(pool2_.get(), dpool2_.get(), planes2 * 7 * 7, s);
      MaxPoolBackward(dpool2_.get(), arg2_.get(), planes2, 14, 14, dconv2_.get(), s);
      ConvBackward(blas_, s, col2_.get(), Value(2), dconv2_.get(), n, 14, 14, 32, 64, 5, Grad(2),
                   Grad(3), dpool1_.get());
      ReluBackward(pool1_.get(), dpool1_.get(), planes1 * 14 * 14, s);
      MaxPoolBackward(dpool1_.get(), arg1_.get(), planes1, 28, 28, dconv1_.get(), s);
      ConvBackward(blas_, s, col1_.get(), Value(0), dconv1_.get(), n, 28, 28, 1, 32, 5, Grad(0),
                   Grad(1), nullptr);
      break;
    }
  }
}

void DeviceNet::Loss() {
  DeviceGuard guard(device_);
  SoftmaxCrossEntropy(logits_.get(), labels_.get(), batch_, kClasses, 0.0f, row_loss_.get(),
                      nullptr, stream_);
  loss_pending_ = true;
}

void DeviceNet::Argmax() {
  DeviceGuard guard(device_);
  cuda::Argmax(logits_.get(), batch_, kClasses, predictions_.get(), stream_);
  predictions_pending_ = true;
}

double DeviceNet::Finish(uint8_t* predictions) {
  DeviceGuard guard(device_);
  const size_t n = static_cast<size_t>(batch_);
  double* host_loss = nullptr;
  uint8_t* host_predictions = nullptr;
  if (loss_pending_) {
    host_loss = staged_loss_.Ensure(n);
    KUBEPS_CUDA_CHECK(cudaMemcpyAsync(host_loss, row_loss_.get(), n * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream_));
  }
  if (predictions_pending_ && predictions != nullptr) {
    host_predictions = staged_predictions_.Ensure(n);
    KUBEPS_CUDA_CHECK(
        cudaMemcpyAsync(host_predictions, predictions_.get(), n, cudaMemcpyDeviceToHost, stream_));
  }
  KUBEPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  loss_pending_ = predictions_pending_ = false;
  double total = 0.0;
  if (host_loss != nullptr) {
    for (size_t i = 0; i < n; ++i) total += host_loss[i];
  }
  if (host_predictions != nullptr) std::memcpy(predictions, host_predictions, n);
  return total;
}

// ------------------------------------------------------------------ staging

void PackValues(const std::vector<Parameter>& params, const DeviceNet& net, float* staged) {
  if (params.size() != net.param_tensors()) {
    throw std::invalid_argument("CUDA model: expected " + std::to_string(net.param_tensors()) +
                                " parameter tensors, found " + std::to_string(params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const HostTensor& v = params[i].value;
    if (v.size() != net.size(i)) {
      throw std::invalid_argument("CUDA model: parameter '" + params[i].name + "' has " +
                                  std::to_string(v.size()) + " values, expected " +
                                  std::to_string(net.size(i)));
    }
    std::memcpy(staged + net.offset(i), v.data(), v.size() * sizeof(float));
  }
}

void UnpackGrads(const float* staged, const DeviceNet& net, std::vector<Parameter>& params) {
  for (size_t i = 0; i < params.size() && i < net.param_tensors(); ++i) {
    HostTensor& g = params[i].grad;
    g.resize(net.size(i));
    std::memcpy(g.data(), staged + net.offset(i), g.size() * sizeof(float));
  }
}

}  // namespace kubeps::trainer::cuda
