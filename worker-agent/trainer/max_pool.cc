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
  const int planes = c_ * batch;
  const size_t in_plane = static_cast<size_t>(h_) * w_;
  const size_t out_plane = static_cast<size_t>(oh_n) * ow_n;
  float* y = EnsureSize(y_, planes * out_plane);
  uint8_t* arg = EnsureSize(argmax_, planes * out_plane);
  // Planes are independent: each is pooled by one thread.
#pragma omp parallel for schedule(static) if (planes > 1)
  for (int q = 0; q < planes; ++q) {
    for (int oh = 0; oh < oh_n; ++oh) {
      const float* __restrict r0 = x + q * in_plane + static_cast<size_t>(2 * oh) * w_;
      const float* __restrict r1 = r0 + w_;
      float* __restrict yo = y + q * out_plane + static_cast<size_t>(oh) * ow_n;
      uint8_t* __restrict ao = arg + q * out_plane + static_cast<size_t>(oh) * ow_n;
      for (int ow = 0; ow < ow_n; ++ow) {
        const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        float m = a;
        uint8_t k = 0;
        k = b > m ? 1 : k;
        m = b > m ? b : m;
        k = c > m ? 2 : k;
        m = c > m ? c : m;
        k = d > m ? 3 : k;
        m = d > m ? d : m;
        yo[ow] = m;
        ao[ow] = k;
      }
    }
  }
  return y;
}

float* MaxPool2x2::Backward(const float* dy) {
  const int oh_n = h_ / 2, ow_n = w_ / 2;
  const int planes = c_ * batch_;
  const size_t in_plane = static_cast<size_t>(h_) * w_;
  const size_t out_plane = static_cast<size_t>(oh_n) * ow_n;
  float* dx = EnsureSize(dx_, planes * in_plane);
  const uint8_t* arg = argmax_.data();
  // The windows tile the input exactly, so every dx element is written once.
#pragma omp parallel for schedule(static) if (planes > 1)
  for (int q = 0; q < planes; ++q) {
    for (int oh = 0; oh < oh_n; ++oh) {
      float* __restrict r0 = dx + q * in_plane + static_cast<size_t>(2 * oh) * w_;
      float* __restrict r1 = r0 + w_;
      const float* __restrict g = dy + q * out_plane + static_cast<size_t>(oh) * ow_n;
      const uint8_t* __restrict a = arg + q * out_plane + static_cast<size_t>(oh) * ow_n;
      for (int ow = 0; ow < ow_n; ++ow) {
        r0[2 * ow] = a[ow] == 0 ? g[ow] : 0.0f;
        r0[2 * ow + 1] = a[ow] == 1 ? g[ow] : 0.0f;
        r1[2 * ow] = a[ow] == 2 ? g[ow] : 0.0f;
        r1[2 * ow + 1] = a[ow] == 3 ? g[ow] : 0.0f;
      }
    }
  }
  return dx;
}

}  // namespace kubeps::trainer
