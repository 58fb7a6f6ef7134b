#include "worker-agent/trainer/models.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <utility>

#include "api/models.h"
#include "worker-agent/trainer/buffer.h"
#include "worker-agent/trainer/relu.h"

namespace kubeps::trainer {
namespace {

Parameter MakeParameter(std::string name, std::vector<int> shape) {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  Parameter p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.value.assign(n, 0.0f);
  p.grad.assign(n, 0.0f);
  return p;
}

// Uniform in [-limit, limit) from the top 24 bits of each draw, so the values
// do not depend on the standard library's distributions.
void FillUniform(std::mt19937_64& rng, float limit, HostTensor& v) {
  for (float& x : v) {
    const float u = static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    x = (2.0f * u - 1.0f) * limit;
  }
}

float HeLimit(int fan_in) { return std::sqrt(6.0f / static_cast<float>(fan_in)); }
float GlorotLimit(int fan_in, int fan_out) {
  return std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
}

void ZeroGrads(std::vector<Parameter>& params) {
  for (Parameter& p : params) p.grad.assign(p.value.size(), 0.0f);
}

}  // namespace

// ---------------------------------------------------------------- softmax

SoftmaxModel::SoftmaxModel() : dense_(kImageSize, kNumClasses), loss_(kNumClasses) {
  params_.push_back(MakeParameter("dense.weight", {kImageSize, kNumClasses}));
  params_.push_back(MakeParameter("dense.bias", {kNumClasses}));
}

void SoftmaxModel::Initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  FillUniform(rng, GlorotLimit(kImageSize, kNumClasses), params_[0].value);
  params_[1].value.assign(params_[1].value.size(), 0.0f);
  ZeroGrads(params_);
}

const float* SoftmaxModel::Forward(const float* images, int batch) {
  dense_.Bind(&params_[0], &params_[1]);
  Needed(0, 2);
  return dense_.Forward(images, batch);
}

float SoftmaxModel::ForwardBackward(const float* images, const uint8_t* labels, int batch) {
  const float loss = loss_.Forward(Forward(images, batch), labels, batch);
  LossReady(loss);
  dense_.Backward(loss_.Backward(), /*need_input_grad=*/false);
  Ready(0, 2);
  return loss;
}

void SoftmaxModel::Predict(const float* images, int batch, uint8_t* predictions) {
  SoftmaxCrossEntropy::Argmax(Forward(images, batch), batch, kNumClasses, predictions);
}

float SoftmaxModel::ForwardLoss(const float* images, const uint8_t* labels, int batch,
                                uint8_t* predictions) {
  const float* logits = Forward(images, batch);
  if (predictions != nullptr) SoftmaxCrossEntropy::Argmax(logits, batch, kNumClasses, predictions);
  return loss_.Forward(logits, labels, batch);
}

// ---------------------------------------------------------------- mlp

MlpModel::MlpModel() : dense1_(kImageSize, 256), dense2_(256, kNumClasses), loss_(kNumClasses) {
  params_.push_back(MakeParameter("dense1.weight", {kImageSize, 256}));
  params_.push_back(MakeParameter("dense1.bias", {256}));
  params_.push_back(MakeParameter("dense2.weight", {256, kNumClasses}));
  params_.push_back(MakeParameter("dense2.bias", {kNumClasses}));
}

void MlpModel::Initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  FillUniform(rng, HeLimit(kImageSize), params_[0].value);
  params_[1].value.assign(params_[1].value.size(), 0.0f);
  FillUniform(rng, GlorotLimit(256, kNumClasses), params_[2].value);
  params_[3].value.assign(params_[3].value.size(), 0.0f);
  ZeroGrads(params_);
}

const float* MlpModel::Forward(const float* images, int batch) {
  batch_ = batch;
  dense1_.Bind(&params_[0], &params_[1]);
  dense2_.Bind(&params_[2], &params_[3]);
  Needed(0, 2);
  hidden_ = dense1_.Forward(images, batch);
  Relu::Forward(hidden_, static_cast<size_t>(batch) * 256);
  Needed(2, 4);
  return dense2_.Forward(hidden_, batch);
}

float MlpModel::ForwardBackward(const float* images, const uint8_t* labels, int batch) {
  const float loss = loss_.Forward(Forward(images, batch), labels, batch);
  LossReady(loss);
  // dense2's input gradient is its own buffer, so ReLU can work on it in place.
  float* dh = dense2_.Backward(loss_.Backward(), true);
  Ready(2, 4);
  Relu::Backward(hidden_, dh, static_cast<size_t>(batch) * 256);
  dense1_.Backward(dh, /*need_input_grad=*/false);
  Ready(0, 2);
  return loss;
}

void MlpModel::Predict(const float* images, int batch, uint8_t* predictions) {
  SoftmaxCrossEntropy::Argmax(Forward(images, batch), batch, kNumClasses, predictions);
}

float MlpModel::ForwardLoss(const float* images, const uint8_t* labels, int batch,
                            uint8_t* predictions) {
  const float* logits = Forward(images, batch);
  if (predictions != nullptr) SoftmaxCrossEntropy::Argmax(logits, batch, kNumClasses, predictions);
  return loss_.Forward(logits, labels, batch);
}

// ---------------------------------------------------------------- cnn

namespace {
constexpr int kFlat = 7 * 7 * 64;
}  // namespace

CnnModel::CnnModel()
    : conv1_(28, 28, 1, 32, 5),
      pool1_(28, 28, 32),
      conv2_(14, 14, 32, 64, 5),
      pool2_(14, 14, 64),
      dense1_(7 * 7 * 64, 1024),
      dense2_(1024, kNumClasses),
      loss_(kNumClasses) {
  params_.push_back(MakeParameter("conv1.weight", {32, 1, 5, 5}));
  params_.push_back(MakeParameter("conv1.bias", {32}));
  params_.push_back(MakeParameter("conv2.weight", {64, 32, 5, 5}));
  params_.push_back(MakeParameter("conv2.bias", {64}));
  params_.push_back(MakeParameter("dense1.weight", {7 * 7 * 64, 1024}));
  params_.push_back(MakeParameter("dense1.bias", {1024}));
  params_.push_back(MakeParameter("dense2.weight", {1024, kNumClasses}));
  params_.push_back(MakeParameter("dense2.bias", {kNumClasses}));
}

void CnnModel::Initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  FillUniform(rng, HeLimit(5 * 5 * 1), params_[0].value);
  params_[1].value.assign(params_[1].value.size(), 0.0f);
  FillUniform(rng, HeLimit(5 * 5 * 32), params_[2].value);
  params_[3].value.assign(params_[3].value.size(), 0.0f);
  FillUniform(rng, HeLimit(7 * 7 * 64), params_[4].value);
  params_[5].value.assign(params_[5].value.size(), 0.0f);
  FillUniform(rng, GlorotLimit(1024, kNumClasses), params_[6].value);
  params_[7].value.assign(params_[7].value.size(), 0.0f);
  ZeroGrads(params_);
}

const float* CnnModel::Forward(const float* images, int batch) {
  batch_ = batch;
  conv1_.Bind(&params_[0], &params_[1]);
  conv2_.Bind(&params_[2], &params_[3]);
  dense1_.Bind(&params_[4], &params_[5]);
  dense2_.Bind(&params_[6], &params_[7]);
  // ReLU and a max-pool commute (max is monotone), so the ReLUs run on the
  // pooled outputs, a quarter of the size; the results are bit-identical to
  // ReLU before pooling, and so are the gradients (see ForwardBackward).
  Needed(0, 2);
  const float* y1 = conv1_.Forward(images, batch);
  act1_ = pool1_.Forward(y1, batch);
  Relu::Forward(act1_, static_cast<size_t>(batch) * 32 * 14 * 14);
  Needed(2, 4);
  const float* y2 = conv2_.Forward(act1_, batch);
  act2_ = pool2_.Forward(y2, batch);
  Relu::Forward(act2_, static_cast<size_t>(batch) * 64 * 7 * 7);
  const float* p2 = act2_;
  // 64 x batch x 49 (CNHW) -> batch x 3136 with feature index c*49 + h*7 + w.
  float* flat = EnsureSize(flat_, static_cast<size_t>(batch) * kFlat);
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < 64; ++c) {
      std::memcpy(flat + static_cast<size_t>(n) * kFlat + c * 49,
                  p2 + (static_cast<size_t>(c) * batch + n) * 49, 49 * sizeof(float));
    }
  }
  Needed(4, 6);
  act3_ = dense1_.Forward(flat, batch);
  Relu::Forward(act3_, static_cast<size_t>(batch) * 1024);
  Needed(6, 8);
  return dense2_.Forward(act3_, batch);
}

float CnnModel::ForwardBackward(const float* images, const uint8_t* labels, int batch) {
  const float loss = loss_.Forward(Forward(images, batch), labels, batch);
  LossReady(loss);
  // Each Backward returns a buffer owned by its layer; the ReLU steps work
  // on them in place.
  float* g = dense2_.Backward(loss_.Backward(), true);
  Ready(6, 8);
  Relu::Backward(act3_, g, static_cast<size_t>(batch) * 1024);
  const float* dflat = dense1_.Backward(g, true);
  Ready(4, 6);
  float* dp2 = EnsureSize(dp2_, static_cast<size_t>(batch) * kFlat);
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < 64; ++c) {
      std::memcpy(dp2 + (static_cast<size_t>(c) * batch + n) * 49,
                  dflat + static_cast<size_t>(n) * kFlat + c * 49, 49 * sizeof(float));
    }
  }
  // The gradient reaches a conv output only through the winner of its pool
  // window, and the ReLU passes it iff the pooled value is > 0: masking the
  // pooled gradient is exactly the ReLU backward of the conv output.
  Relu::Backward(act2_, dp2, static_cast<size_t>(batch) * 64 * 7 * 7);
  g = conv2_.Backward(pool2_.Backward(dp2), true);
  Ready(2, 4);
  Relu::Backward(act1_, g, static_cast<size_t>(batch) * 32 * 14 * 14);
  g = pool1_.Backward(g);
  conv1_.Backward(g, /*need_input_grad=*/false);
  Ready(0, 2);
  return loss;
}

void CnnModel::Predict(const float* images, int batch, uint8_t* predictions) {
  SoftmaxCrossEntropy::Argmax(Forward(images, batch), batch, kNumClasses, predictions);
}

float CnnModel::ForwardLoss(const float* images, const uint8_t* labels, int batch,
                            uint8_t* predictions) {
  const float* logits = Forward(images, batch);
  if (predictions != nullptr) SoftmaxCrossEntropy::Argmax(logits, batch, kNumClasses, predictions);
  return loss_.Forward(logits, labels, batch);
}

// ---------------------------------------------------------------- factory

// The names are api/models.h's: the list the manifest parser and the CRD
// accept. A switch without a default, so the compiler (-Wswitch) points at a
// kind listed there without a model here.
std::unique_ptr<Model> MakeModel(const std::string& name) {
  std::optional<api::ModelKind> kind = api::FindModel(name);
  if (!kind) return nullptr;
  switch (*kind) {
    case api::ModelKind::kSoftmax:
      return std::make_unique<SoftmaxModel>();
    case api::ModelKind::kMlp:
      return std::make_unique<MlpModel>();
    case api::ModelKind::kCnn:
      return std::make_unique<CnnModel>();
  }
  return nullptr;
}

const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const api::ModelInfo& model : api::kModels) out.push_back(model.name);
    return out;
  }();
  return names;
}

}  // namespace kubeps::trainer
