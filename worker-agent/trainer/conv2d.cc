#include "worker-agent/trainer/conv2d.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "worker-agent/trainer/buffer.h"
#include "worker-agent/trainer/layer_math.h"

namespace kubeps::trainer {

Conv2D::Conv2D(int height, int width, int in_channels, int out_channels, int kernel)
    : h_(height), w_(width), cin_(in_channels), cout_(out_channels), k_(kernel), pad_(kernel / 2) {
  assert(kernel % 2 == 1);
}

void Conv2D::Bind(Parameter* weight, Parameter* bias) {
  assert(weight->value.size() == static_cast<size_t>(k_) * k_ * cin_ * cout_);
  assert(bias->value.size() == static_cast<size_t>(cout_));
  weight_ = weight;
  bias_ = bias;
}

// Row (n, oh, ow) of col holds, for kh = 0..k-1, the k*Cin floats
// x[n][oh+kh-pad][ow-pad .. ow-pad+k-1][0..Cin-1], zeros outside the image.
void Conv2D::Im2Col(const float* x, int batch, float* col) const {
  const size_t row_len = static_cast<size_t>(k_) * k_ * cin_;
  const size_t tap_row = static_cast<size_t>(k_) * cin_;  // one kernel row
  const size_t image = static_cast<size_t>(h_) * w_ * cin_;
  for (int n = 0; n < batch; ++n) {
    const float* xn = x + n * image;
    for (int oh = 0; oh < h_; ++oh) {
      for (int ow = 0; ow < w_; ++ow) {
        float* row = col + ((static_cast<size_t>(n) * h_ + oh) * w_ + ow) * row_len;
        const int iw0 = ow - pad_;
        const int lo = std::max(0, -iw0);             // first tap inside
        const int hi = std::min(k_, w_ - iw0);        // one past the last
        for (int kh = 0; kh < k_; ++kh) {
          float* dst = row + kh * tap_row;
          const int ih = oh + kh - pad_;
          if (ih < 0 || ih >= h_) {
            std::memset(dst, 0, tap_row * sizeof(float));
            continue;
          }
          if (lo > 0) std::memset(dst, 0, static_cast<size_t>(lo) * cin_ * sizeof(float));
          std::memcpy(dst + static_cast<size_t>(lo) * cin_,
                      xn + (static_cast<size_t>(ih) * w_ + iw0 + lo) * cin_,
                      static_cast<size_t>(hi - lo) * cin_ * sizeof(float));
          if (hi < k_) {
            std::memset(dst + static_cast<size_t>(hi) * cin_, 0,
                        static_cast<size_t>(k_ - hi) * cin_ * sizeof(float));
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: every entry of col is added to the input position
// it was copied from. Output pixels are visited in order, so the sums are
// always formed in the same order.
void Conv2D::Col2Im(const float* col, int batch, float* dx) const {
  const size_t row_len = static_cast<size_t>(k_) * k_ * cin_;
  const size_t tap_row = static_cast<size_t>(k_) * cin_;
  const size_t image = static_cast<size_t>(h_) * w_ * cin_;
  std::memset(dx, 0, static_cast<size_t>(batch) * image * sizeof(float));
  for (int n = 0; n < batch; ++n) {
    float* dxn = dx + n * image;
    for (int oh = 0; oh < h_; ++oh) {
      for (int ow = 0; ow < w_; ++ow) {
        const float* row = col + ((static_cast<size_t>(n) * h_ + oh) * w_ + ow) * row_len;
        const int iw0 = ow - pad_;
        const int lo = std::max(0, -iw0);
        const int hi = std::min(k_, w_ - iw0);
        const size_t len = static_cast<size_t>(hi - lo) * cin_;
        for (int kh = 0; kh < k_; ++kh) {
          const int ih = oh + kh - pad_;
          if (ih < 0 || ih >= h_) continue;
          const float* __restrict src = row + kh * tap_row + static_cast<size_t>(lo) * cin_;
          float* __restrict dst = dxn + (static_cast<size_t>(ih) * w_ + iw0 + lo) * cin_;
          for (size_t i = 0; i < len; ++i) dst[i] += src[i];
        }
      }
    }
  }
}

float* Conv2D::Forward(const float* x, int batch) {
  batch_ = batch;
  const int rows = batch * h_ * w_;
  const int row_len = k_ * k_ * cin_;
  float* col = EnsureSize(col_, static_cast<size_t>(rows) * row_len);
  float* y = EnsureSize(y_, static_cast<size_t>(rows) * cout_);
  Im2Col(x, batch, col);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cout_, row_len, 1.0f, col, row_len,
              weight_->value.data(), cout_, 0.0f, y, cout_);
  AddRowVector(y, rows, cout_, bias_->value.data());
  return y;
}

float* Conv2D::Backward(const float* dy, bool need_input_grad) {
  const int rows = batch_ * h_ * w_;
  const int row_len = k_ * k_ * cin_;
  float* col = col_.data();
  weight_->grad.resize(weight_->value.size());
  bias_->grad.resize(bias_->value.size());
  // dW = col^T dy  ((k*k*Cin) x Cout)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, row_len, cout_, rows, 1.0f, col, row_len, dy,
              cout_, 0.0f, weight_->grad.data(), cout_);
  SumRows(dy, rows, cout_, bias_->grad.data());
  if (!need_input_grad) return nullptr;
  // dcol = dy W^T, over the im2col buffer.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, row_len, cout_, 1.0f, dy, cout_,
              weight_->value.data(), cout_, 0.0f, col, row_len);
  float* dx = EnsureSize(dx_, static_cast<size_t>(batch_) * h_ * w_ * cin_);
  Col2Im(col, batch_, dx);
  return dx;
}

}  // namespace kubeps::trainer
