#include "worker-agent/trainer/conv2d.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "worker-agent/trainer/buffer.h"

namespace kubeps::trainer {
namespace {

// Sum of n floats in 16 interleaved partial sums, combined in a fixed order:
// vectorisable without -ffast-math and the same on every run.
float SumContiguous(const float* __restrict x, size_t n) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += x[i];
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}

}  // namespace

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

// In a row of col (batch planes of H x W), zeroes the pixels whose source
// pixel, shifted by (dh, dw), falls outside their own image.
void Conv2D::ZeroBorder(float* row, int batch, int dh, int dw) const {
  const size_t plane = static_cast<size_t>(h_) * w_;
  const int valid_lo = std::max(0, -dh), valid_hi = std::min(h_, h_ - dh);  // rows in range
  for (int n = 0; n < batch; ++n) {
    float* img = row + n * plane;
    if (valid_lo > 0) std::memset(img, 0, static_cast<size_t>(valid_lo) * w_ * sizeof(float));
    if (valid_hi < h_) {
      std::memset(img + static_cast<size_t>(valid_hi) * w_, 0,
                  static_cast<size_t>(h_ - valid_hi) * w_ * sizeof(float));
    }
    if (dw > 0) {
      for (int oh = valid_lo; oh < valid_hi; ++oh) {
        float* r = img + static_cast<size_t>(oh) * w_ + (w_ - dw);
        for (int i = 0; i < dw; ++i) r[i] = 0.0f;
      }
    } else if (dw < 0) {
      for (int oh = valid_lo; oh < valid_hi; ++oh) {
        float* r = img + static_cast<size_t>(oh) * w_;
        for (int i = 0; i < -dw; ++i) r[i] = 0.0f;
      }
    }
  }
}

void Conv2D::Im2Col(const float* x, int batch, float* col) const {
  const long p = static_cast<long>(batch) * h_ * w_;
  const int taps = k_ * k_;
  const int rows = cin_ * taps;
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int k = 0; k < rows; ++k) {
    const int ci = k / taps, dh = (k % taps) / k_ - pad_, dw = k % k_ - pad_;
    const long off = static_cast<long>(dh) * w_ + dw;  // flat shift within the plane
    const float* src = x + ci * p;
    float* dst = col + k * p;
    // dst[j] = src[j + off] where that is inside the array, then the border.
    const long j0 = std::clamp(-off, 0L, p), j1 = std::clamp(p - off, j0, p);
    std::memset(dst, 0, static_cast<size_t>(j0) * sizeof(float));
    std::memcpy(dst + j0, src + j0 + off, static_cast<size_t>(j1 - j0) * sizeof(float));
    std::memset(dst + j1, 0, static_cast<size_t>(p - j1) * sizeof(float));
    ZeroBorder(dst, batch, dh, dw);
  }
}

// The adjoint of Im2Col: each row of col, with its out-of-image pixels
// zeroed, is added back shifted. A thread owns whole input channels and adds
// the k*k rows of a channel in order.
void Conv2D::Col2Im(float* col, int batch, float* dx) const {
  const long p = static_cast<long>(batch) * h_ * w_;
  const int taps = k_ * k_;
#pragma omp parallel for schedule(static) if (cin_ > 1)
  for (int ci = 0; ci < cin_; ++ci) {
    float* __restrict dst = dx + ci * p;
    std::memset(dst, 0, static_cast<size_t>(p) * sizeof(float));
    for (int t = 0; t < taps; ++t) {
      const int dh = t / k_ - pad_, dw = t % k_ - pad_;
      const long off = static_cast<long>(dh) * w_ + dw;
      float* row = col + (static_cast<long>(ci) * taps + t) * p;
      ZeroBorder(row, batch, dh, dw);
      const long j0 = std::clamp(-off, 0L, p), j1 = std::clamp(p - off, j0, p);
      const float* __restrict src = row + j0;
      float* __restrict out = dst + (j0 + off);
      const long m = j1 - j0;
      for (long j = 0; j < m; ++j) out[j] += src[j];
    }
  }
}

float* Conv2D::Forward(const float* x, int batch) {
  batch_ = batch;
  const int p = batch * h_ * w_;
  const int kdim = k_ * k_ * cin_;
  float* col = EnsureSize(col_, static_cast<size_t>(kdim) * p);
  float* y = EnsureSize(y_, static_cast<size_t>(cout_) * p);
  Im2Col(x, batch, col);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout_, p, kdim, 1.0f,
              weight_->value.data(), kdim, col, p, 0.0f, y, p);
  const float* b = bias_->value.data();
#pragma omp parallel for schedule(static) if (cout_ > 1)
  for (int co = 0; co < cout_; ++co) {
    float* __restrict r = y + static_cast<size_t>(co) * p;
    const float v = b[co];
    for (int j = 0; j < p; ++j) r[j] += v;
  }
  return y;
}

float* Conv2D::Backward(const float* dy, bool need_input_grad) {
  const int p = batch_ * h_ * w_;
  const int kdim = k_ * k_ * cin_;
  float* col = col_.data();
  weight_->grad.resize(weight_->value.size());
  bias_->grad.resize(bias_->value.size());
  // dW = dy col^T  (Cout x K)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cout_, kdim, p, 1.0f, dy, p, col, p, 0.0f,
              weight_->grad.data(), kdim);
  float* db = bias_->grad.data();
#pragma omp parallel for schedule(static) if (cout_ > 1)
  for (int co = 0; co < cout_; ++co) db[co] = SumContiguous(dy + static_cast<size_t>(co) * p, p);
  if (!need_input_grad) return nullptr;
  // dcol = W^T dy  (K x P), over the im2col buffer.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kdim, p, cout_, 1.0f, weight_->value.data(),
              kdim, dy, p, 0.0f, col, p);
  float* dx = EnsureSize(dx_, static_cast<size_t>(cin_) * p);
  Col2Im(col, batch_, dx);
  return dx;
}

}  // namespace kubeps::trainer
