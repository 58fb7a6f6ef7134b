#include "worker-agent/trainer/layer_math.h"

namespace kubeps::trainer {

void AddRowVector(float* __restrict y, size_t rows, size_t cols, const float* __restrict v) {
  for (size_t r = 0; r < rows; ++r) {
    float* __restrict row = y + r * cols;
    for (size_t c = 0; c < cols; ++c) row[c] += v[c];
  }
}

void SumRows(const float* __restrict x, size_t rows, size_t cols, float* __restrict out) {
  for (size_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    for (size_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

}  // namespace kubeps::trainer
