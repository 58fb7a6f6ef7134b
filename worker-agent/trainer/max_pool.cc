#include "worker-agent/trainer/max_pool.h"

#include <cassert>

#include "worker-agent/trainer/buffer.h"

namespace kubeps::trainer {

MaxPool2x2::MaxPool2x2(int height, int width, int channels) : h_(height), w_(width), c_(channels) {
  assert(height % 2 == 0 && width % 2 == 0);
}

float* MaxPool2x2::Forward(const float* x, int batch) {
  batch_ = batch;
  const int oh_n = h_ / 2, ow_n = w_ / 2;
  const size_t out = static_cast<size_t>(batch) * oh_n * ow_n * c_;
  float* y = EnsureSize(y_, out);
  uint8_t* arg = EnsureSize(argmax_, out);
  const size_t row = static_cast<size_t>(w_) * c_;
  for (int n = 0; n < batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        const float* __restrict p00 = x + ((static_cast<size_t>(n) * h_ + 2 * oh) * w_ + 2 * ow) * c_;
        const float* __restrict p01 = p00 + c_;
        const float* __restrict p10 = p00 + row;
        const float* __restrict p11 = p10 + c_;
        const size_t o = ((static_cast<size_t>(n) * oh_n + oh) * ow_n + ow) * c_;
        float* __restrict yo = y + o;
        uint8_t* __restrict ao = arg + o;
        for (int c = 0; c < c_; ++c) {
          float m = p00[c];
          uint8_t k = 0;
          k = p01[c] > m ? 1 : k;
          m = p01[c] > m ? p01[c] : m;
          k = p10[c] > m ? 2 : k;
          m = p10[c] > m ? p10[c] : m;
          k = p11[c] > m ? 3 : k;
          m = p11[c] > m ? p11[c] : m;
          yo[c] = m;
          ao[c] = k;
        }
      }
    }
  }
  return y;
}

float* MaxPool2x2::Backward(const float* dy) {
  const int oh_n = h_ / 2, ow_n = w_ / 2;
  float* dx = EnsureSize(dx_, static_cast<size_t>(batch_) * h_ * w_ * c_);
  const uint8_t* arg = argmax_.data();
  const size_t row = static_cast<size_t>(w_) * c_;
  // The windows tile the input exactly, so every dx element is written once.
  for (int n = 0; n < batch_; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        float* __restrict q00 = dx + ((static_cast<size_t>(n) * h_ + 2 * oh) * w_ + 2 * ow) * c_;
        float* __restrict q01 = q00 + c_;
        float* __restrict q10 = q00 + row;
        float* __restrict q11 = q10 + c_;
        const size_t o = ((static_cast<size_t>(n) * oh_n + oh) * ow_n + ow) * c_;
        const float* __restrict g = dy + o;
        const uint8_t* __restrict a = arg + o;
        for (int c = 0; c < c_; ++c) {
          q00[c] = a[c] == 0 ? g[c] : 0.0f;
          q01[c] = a[c] == 1 ? g[c] : 0.0f;
          q10[c] = a[c] == 2 ? g[c] : 0.0f;
          q11[c] = a[c] == 3 ? g[c] : 0.0f;
        }
      }
    }
  }
  return dx;
}

}  // namespace kubeps::trainer
