// Small row-wise helpers shared by the layers. Large inputs are split over
// the OpenMP threads in fixed blocks combined in a fixed order, so the
// results are bit-identical from run to run and for any thread count.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_LAYER_MATH_H_
#define KUBEPS_WORKER_AGENT_TRAINER_LAYER_MATH_H_

#include <cstddef>

namespace kubeps::trainer {

// y[r][c] += v[c] for a rows x cols row-major matrix.
void AddRowVector(float* y, size_t rows, size_t cols, const float* v);

// out[c] = sum over r of x[r][c] (blocks of rows summed in order).
void SumRows(const float* x, size_t rows, size_t cols, float* out);

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_LAYER_MATH_H_
