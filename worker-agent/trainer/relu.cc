#include "worker-agent/trainer/relu.h"

namespace kubeps::trainer {

void Relu::Forward(float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void Relu::Backward(const float* __restrict y, float* __restrict dy, size_t n) {
  for (size_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace kubeps::trainer
