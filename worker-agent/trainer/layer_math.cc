#include "worker-agent/trainer/layer_math.h"

#include <algorithm>
#include <vector>

namespace kubeps::trainer {
namespace {
// Rows per block of the parallel loops. SumRows adds fixed blocks in a
// fixed order, so its result does not depend on the number of threads.
constexpr size_t kRowBlock = 2048;
}  // namespace

void AddRowVector(float* y, size_t rows, size_t cols, const float* v) {
  const long blocks = static_cast<long>((rows + kRowBlock - 1) / kRowBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (long b = 0; b < blocks; ++b) {
    const size_t end = std::min(rows, (static_cast<size_t>(b) + 1) * kRowBlock);
    for (size_t r = static_cast<size_t>(b) * kRowBlock; r < end; ++r) {
      float* __restrict row = y + r * cols;
      const float* __restrict bias = v;
      for (size_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
}

void SumRows(const float* x, size_t rows, size_t cols, float* out) {
  const size_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  if (blocks <= 1) {
    for (size_t c = 0; c < cols; ++c) out[c] = 0.0f;
    for (size_t r = 0; r < rows; ++r) {
      const float* __restrict row = x + r * cols;
      float* __restrict o = out;
      for (size_t c = 0; c < cols; ++c) o[c] += row[c];
    }
    return;
  }
  thread_local std::vector<float> partial;
  partial.assign(blocks * cols, 0.0f);
  float* part = partial.data();
#pragma omp parallel for schedule(static)
  for (long b = 0; b < static_cast<long>(blocks); ++b) {
    float* __restrict o = part + static_cast<size_t>(b) * cols;
    const size_t end = std::min(rows, (static_cast<size_t>(b) + 1) * kRowBlock);
    for (size_t r = static_cast<size_t>(b) * kRowBlock; r < end; ++r) {
      const float* __restrict row = x + r * cols;
      for (size_t c = 0; c < cols; ++c) o[c] += row[c];
    }
  }
  for (size_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (size_t b = 0; b < blocks; ++b) {
    const float* __restrict p = part + b * cols;
    for (size_t c = 0; c < cols; ++c) out[c] += p[c];
  }
}

}  // namespace kubeps::trainer
