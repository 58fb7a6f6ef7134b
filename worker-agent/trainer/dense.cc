#include "worker-agent/trainer/dense.h"

#include <cblas.h>

#include <cassert>
#include <cstring>

#include "worker-agent/trainer/buffer.h"
#include "worker-agent/trainer/layer_math.h"

namespace kubeps::trainer {

Dense::Dense(int in_features, int out_features) : in_(in_features), out_(out_features) {}

void Dense::Bind(Parameter* weight, Parameter* bias) {
  assert(weight->value.size() == static_cast<size_t>(in_) * out_);
  assert(bias->value.size() == static_cast<size_t>(out_));
  weight_ = weight;
  bias_ = bias;
}

float* Dense::Forward(const float* x, int batch) {
  x_ = x;
  batch_ = batch;
  float* y = EnsureSize(y_, static_cast<size_t>(batch) * out_);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out_, in_, 1.0f, x, in_,
              weight_->value.data(), out_, 0.0f, y, out_);
  AddRowVector(y, batch, out_, bias_->value.data());
  return y;
}

float* Dense::Backward(const float* dy, bool need_input_grad) {
  weight_->grad.resize(weight_->value.size());
  bias_->grad.resize(bias_->value.size());
  // dW = x^T dy  (in x out)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in_, out_, batch_, 1.0f, x_, in_, dy, out_,
              0.0f, weight_->grad.data(), out_);
  SumRows(dy, batch_, out_, bias_->grad.data());
  if (!need_input_grad) return nullptr;
  // dx = dy W^T  (batch x in)
  float* dx = EnsureSize(dx_, static_cast<size_t>(batch_) * in_);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch_, in_, out_, 1.0f, dy, out_,
              weight_->value.data(), out_, 0.0f, dx, in_);
  return dx;
}

}  // namespace kubeps::trainer
