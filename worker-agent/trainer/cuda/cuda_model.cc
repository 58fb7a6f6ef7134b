#include "worker-agent/trainer/cuda/cuda_model.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "worker-agent/trainer/cuda/cuda_check.h"
#include "worker-agent/trainer/cuda/device_net.h"
#include "worker-agent/trainer/cuda/nccl_check.h"

namespace kubeps::trainer {
namespace {

constexpr int kImage = 28 * 28;

// The CPU model of the same name: the source of the parameter layout and of
// the initial values, so both backends agree on them by construction.
std::unique_ptr<Model> CpuTwin(const std::string& model) {
  std::unique_ptr<Model> cpu = MakeModel(model);
  if (cpu == nullptr) throw std::invalid_argument("CUDA model: unknown model '" + model + "'");
  return cpu;
}

void CheckBatch(int batch) {
  if (batch < 0) throw std::invalid_argument("CUDA model: negative batch size");
}

void CheckLabels(const uint8_t* labels, int batch) {
  if (labels == nullptr && batch > 0) throw std::invalid_argument("CUDA model: labels are null");
}

// An empty batch: as on the CPU, zero gradients and a loss of 0.
float EmptyStep(std::vector<Parameter>& params) {
  for (Parameter& p : params) p.grad.assign(p.value.size(), 0.0f);
  return 0.0f;
}

}  // namespace

// ------------------------------------------------------------------ CudaModel

CudaModel::CudaModel(const std::string& model, int device) : model_(model) {
  params_ = CpuTwin(model)->parameters();
  net_ = std::make_unique<cuda::DeviceNet>(model, device, params_);
  staged_values_ = std::make_unique<cuda::PinnedBuffer<float>>();
  staged_grads_ = std::make_unique<cuda::PinnedBuffer<float>>();
}

CudaModel::~CudaModel() = default;

int CudaModel::device() const { return net_->device(); }

void CudaModel::Initialize(uint64_t seed) {
  std::unique_ptr<Model> cpu = CpuTwin(model_);
  cpu->Initialize(seed);
  params_ = cpu->parameters();
}

float CudaModel::ForwardBackward(const float* images, const uint8_t* labels, int batch) {
  CheckBatch(batch);
  CheckLabels(labels, batch);
  if (batch == 0) return EmptyStep(params_);
  cuda::DeviceNet& net = *net_;
  net.Stage(images, labels, batch);  // also waits for the previous step
  // Host -> device: the PS client has written the pulled parameters into
  // `value`; they go through the pinned staging buffer in one copy.
  float* values = staged_values_->Ensure(net.param_count());
  cuda::PackValues(params_, net, values);
  net.UploadValues(values);
  net.Forward();
  net.Backward(1.0f / static_cast<float>(batch));
  // Device -> host: the PS client pushes `grad` from host memory.
  float* grads = staged_grads_->Ensure(net.param_count());
  net.DownloadGrads(grads);
  const double total = net.Finish(nullptr);
  cuda::UnpackGrads(grads, net, params_);
  return static_cast<float>(total / batch);
}

void CudaModel::Predict(const float* images, int batch, uint8_t* predictions) {
  CheckBatch(batch);
  if (batch == 0) return;
  cuda::DeviceNet& net = *net_;
  net.Stage(images, nullptr, batch);
  float* values = staged_values_->Ensure(net.param_count());
  cuda::PackValues(params_, net, values);
  net.UploadValues(values);
  net.Forward();
  net.Argmax();
  net.Finish(predictions);
}

float CudaModel::ForwardLoss(const float* images, const uint8_t* labels, int batch,
                             uint8_t* predictions) {
  CheckBatch(batch);
  CheckLabels(labels, batch);
  if (batch == 0) return 0.0f;
  cuda::DeviceNet& net = *net_;
  net.Stage(images, labels, batch);
  float* values = staged_values_->Ensure(net.param_count());
  cuda::PackValues(params_, net, values);
  net.UploadValues(values);
  net.Forward();
  net.Loss();
  if (predictions != nullptr) net.Argmax();
  return static_cast<float>(net.Finish(predictions) / batch);
}

// ------------------------------------------------------------------ MultiGpuModel

MultiGpuModel::MultiGpuModel(const std::string& model, int gpus) : model_(model) {
  int devices = 0;
  KUBEPS_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (gpus < 1 || gpus > devices) {
    throw std::invalid_argument("MultiGpuModel: gpus=" + std::to_string(gpus) + " but " +
                                std::to_string(devices) + " CUDA device(s) are visible");
  }
  for (int g = 0; g < gpus; ++g) replicas_.push_back(std::make_unique<CudaModel>(model, g));
  params_ = CpuTwin(model)->parameters();
  if (gpus > 1) {
    // One communicator per device, all created by this thread.
    std::vector<int> device_ids(gpus);
    std::iota(device_ids.begin(), device_ids.end(), 0);
    comms_.assign(gpus, nullptr);
    KUBEPS_NCCL_CHECK(ncclCommInitAll(comms_.data(), gpus, device_ids.data()));
  }
  staged_values_ = std::make_unique<cuda::PinnedBuffer<float>>();
  staged_grads_ = std::make_unique<cuda::PinnedBuffer<float>>();
}

MultiGpuModel::~MultiGpuModel() {
  for (ncclComm* comm : comms_) {
    if (comm != nullptr) ncclCommDestroy(comm);  // best effort in a destructor
  }
}

void MultiGpuModel::Initialize(uint64_t seed) {
  std::unique_ptr<Model> cpu = CpuTwin(model_);
  cpu->Initialize(seed);
  params_ = cpu->parameters();
}

int MultiGpuModel::SliceStart(int batch, int gpus, int g) {
  return g * (batch / gpus) + std::min(g, batch % gpus);
}

void MultiGpuModel::UploadToAll() {
  cuda::DeviceNet& first = replicas_[0]->net();
  float* values = staged_values_->Ensure(first.param_count());
  cuda::PackValues(params_, first, values);
  for (auto& replica : replicas_) replica->net().UploadValues(values);
}

double MultiGpuModel::ForwardAll(const float* images, const uint8_t* labels, int batch,
                                 uint8_t* predictions) {
  const int gpus = this->gpus();
  for (int g = 0; g < gpus; ++g) {
    const int start = SliceStart(batch, gpus, g), count = SliceStart(batch, gpus, g + 1) - start;
    if (count == 0) continue;
    replicas_[g]->net().Stage(images + static_cast<size_t>(start) * kImage,
                              labels != nullptr ? labels + start : nullptr, count);
  }
  UploadToAll();
  for (int g = 0; g < gpus; ++g) {
    if (SliceStart(batch, gpus, g + 1) == SliceStart(batch, gpus, g)) continue;
    cuda::DeviceNet& net = replicas_[g]->net();
    net.Forward();
    if (labels != nullptr) net.Loss();
    if (predictions != nullptr) net.Argmax();
  }
  double total = 0.0;
  for (int g = 0; g < gpus; ++g) {
    const int start = SliceStart(batch, gpus, g);
    if (SliceStart(batch, gpus, g + 1) == start) continue;
    total += replicas_[g]->net().Finish(predictions != nullptr ? predictions + start : nullptr);
  }
  return total;
}

float MultiGpuModel::ForwardBackward(const float* images, const uint8_t* labels, int batch) {
  CheckBatch(batch);
  CheckLabels(labels, batch);
  if (batch == 0) return EmptyStep(params_);
  const int gpus = this->gpus();
  for (int g = 0; g < gpus; ++g) {
    const int start = SliceStart(batch, gpus, g), count = SliceStart(batch, gpus, g + 1) - start;
    if (count == 0) continue;
    replicas_[g]->net().Stage(images + static_cast<size_t>(start) * kImage, labels + start, count);
  }
  // The pulled parameters, broadcast: one staged copy, uploaded to each device.
  UploadToAll();
  // Every replica scales by the whole batch, so the sum below is the
  // gradient of the mean loss over the whole batch.
  const float grad_scale = 1.0f / static_cast<float>(batch);
  for (int g = 0; g < gpus; ++g) {
    cuda::DeviceNet& net = replicas_[g]->net();
    if (SliceStart(batch, gpus, g + 1) == SliceStart(batch, gpus, g)) {
      net.ZeroGrads();
    } else {
      net.Forward();
      net.Backward(grad_scale);
    }
  }
  if (gpus > 1) {
    // In-place sum of all gradients over the replicas: one allreduce per
    // device, on its stream, issued together as one NCCL group.
    KUBEPS_NCCL_CHECK(ncclGroupStart());
    try {
      for (int g = 0; g < gpus; ++g) {
        cuda::DeviceNet& net = replicas_[g]->net();
        KUBEPS_NCCL_CHECK(ncclAllReduce(net.grads(), net.grads(), net.param_count(), ncclFloat,
                                        ncclSum, comms_[g], net.stream()));
      }
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    KUBEPS_NCCL_CHECK(ncclGroupEnd());
  }
  // Every replica now holds the sum; copy it to the host once, from device 0.
  cuda::DeviceNet& first = replicas_[0]->net();
  float* grads = staged_grads_->Ensure(first.param_count());
  first.DownloadGrads(grads);
  double total = 0.0;
  for (auto& replica : replicas_) total += replica->net().Finish(nullptr);
  cuda::UnpackGrads(grads, first, params_);
  return static_cast<float>(total / batch);
}

void MultiGpuModel::Predict(const float* images, int batch, uint8_t* predictions) {
  CheckBatch(batch);
  if (batch == 0) return;
  ForwardAll(images, nullptr, batch, predictions);
}

float MultiGpuModel::ForwardLoss(const float* images, const uint8_t* labels, int batch,
                                 uint8_t* predictions) {
  CheckBatch(batch);
  CheckLabels(labels, batch);
  if (batch == 0) return 0.0f;
  return static_cast<float>(ForwardAll(images, labels, batch, predictions) / batch);
}

}  // namespace kubeps::trainer
