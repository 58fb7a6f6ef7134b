#include "worker-agent/trainer/relu.h"

#include <algorithm>

namespace kubeps::trainer {
namespace {
// Element-wise, so splitting the work over OpenMP threads changes nothing
// in the results; small arrays stay on one thread.
constexpr size_t kBlock = 1 << 16;
}  // namespace

void Relu::Forward(float* x, size_t n) {
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (long b = 0; b < blocks; ++b) {
    float* __restrict p = x + static_cast<size_t>(b) * kBlock;
    const size_t m = std::min(kBlock, n - static_cast<size_t>(b) * kBlock);
    for (size_t i = 0; i < m; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
  }
}

void Relu::Backward(const float* y, float* dy, size_t n) {
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (long b = 0; b < blocks; ++b) {
    const size_t off = static_cast<size_t>(b) * kBlock;
    const float* __restrict yb = y + off;
    float* __restrict g = dy + off;
    const size_t m = std::min(kBlock, n - off);
    for (size_t i = 0; i < m; ++i) g[i] = yb[i] > 0.0f ? g[i] : 0.0f;
  }
}

}  // namespace kubeps::trainer
