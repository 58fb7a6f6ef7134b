#include "worker-agent/trainer/max_pool.h"

#include <cassert>

#include "worker-agent/trainer/buffer.h"

namespace kubeps::trainer {
namespace {

// The winner of a window (a, b) over (c, d): the first of the largest, by
// the same chain of strict comparisons in Forward and Backward, so both
// agree on every input, ties and NaN included. Branch-free, and the index a
// float, so that the whole chain is selects between floats: the loops that
// call it vectorise (blends over stride-2 loads; no byte-sized side array).
struct Winner {
  float value;
  float index;  // 0..3: (0,0) (0,1) (1,0) (1,1)
};

inline Winner WinnerOf(float a, float b, float c, float d) {
  float m = a, k = 0.0f;
  k = b > m ? 1.0f : k;
  m = b > m ? b : m;
  k = c > m ? 2.0f : k;
  m = c > m ? c : m;
  k = d > m ? 3.0f : k;
  m = d > m ? d : m;
  return {m, k};
}

}  // namespace

MaxPool2x2::MaxPool2x2(int height, int width, int channels) : h_(height), w_(width), c_(channels) {
  assert(height % 2 == 0 && width % 2 == 0);
}

float* MaxPool2x2::Forward(const float* x, int batch) {
  batch_ = batch;
  x_ = x;
  const int oh_n = h_ / 2, ow_n = w_ / 2;
  const int planes = c_ * batch;
  const size_t in_plane = static_cast<size_t>(h_) * w_;
  const size_t out_plane = static_cast<size_t>(oh_n) * ow_n;
  float* y = EnsureSize(y_, planes * out_plane);
  // Planes are independent: each is pooled by one thread.
#pragma omp parallel for schedule(static) if (planes > 1)
  for (int q = 0; q < planes; ++q) {
    for (int oh = 0; oh < oh_n; ++oh) {
      const float* __restrict r0 = x + q * in_plane + static_cast<size_t>(2 * oh) * w_;
      const float* __restrict r1 = r0 + w_;
      float* __restrict yo = y + q * out_plane + static_cast<size_t>(oh) * ow_n;
#pragma omp simd
      for (int ow = 0; ow < ow_n; ++ow) {
        yo[ow] = WinnerOf(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]).value;
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
  const float* x = x_;
  // The windows tile the input exactly, so every dx element is written once.
  // The winner is found again from the input: cheaper than storing it, the
  // input being read once more while the gradient is written.
#pragma omp parallel for schedule(static) if (planes > 1)
  for (int q = 0; q < planes; ++q) {
    for (int oh = 0; oh < oh_n; ++oh) {
      const size_t row = q * in_plane + static_cast<size_t>(2 * oh) * w_;
      const float* __restrict x0 = x + row;
      const float* __restrict x1 = x0 + w_;
      float* __restrict r0 = dx + row;
      float* __restrict r1 = r0 + w_;
      const float* __restrict g = dy + q * out_plane + static_cast<size_t>(oh) * ow_n;
#pragma omp simd
      for (int ow = 0; ow < ow_n; ++ow) {
        const float k = WinnerOf(x0[2 * ow], x0[2 * ow + 1], x1[2 * ow], x1[2 * ow + 1]).index;
        const float gradient = g[ow];  // read once, unconditionally: no branch in the loop
        r0[2 * ow] = k == 0.0f ? gradient : 0.0f;
        r0[2 * ow + 1] = k == 1.0f ? gradient : 0.0f;
        r1[2 * ow] = k == 2.0f ? gradient : 0.0f;
        r1[2 * ow + 1] = k == 3.0f ? gradient : 0.0f;
      }
    }
  }
  return dx;
}

}  // namespace kubeps::trainer
