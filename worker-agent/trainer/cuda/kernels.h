// The element-wise and data-movement kernels of the CUDA backend, behind
// plain host functions that launch them on a stream (kernels.cu). Each one
// is the device twin of a CPU loop of the trainer and keeps its layout:
// row-major batch x features for dense layers, CNHW (C planes of
// batch x H x W) for the convolution part. The matrix products are cuBLAS
// calls in device_ops.cc.
//
// Every function returns right after the launch (a zero-size call launches
// nothing) and throws std::runtime_error if the launch fails. Results are
// deterministic: each output element is written by one thread, and sums run
// in a fixed order.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_KERNELS_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kubeps::trainer::cuda {

// y[r][c] += b[c] for a rows x cols row-major matrix (dense bias).
void AddRowVector(float* y, int rows, int cols, const float* b, cudaStream_t stream);
// out[c] = sum over r of x[r][c] (dense bias gradient).
void SumRows(const float* x, int rows, int cols, float* out, cudaStream_t stream);

// y[c][j] += b[c] for `channels` planes of `plane` elements (conv bias).
void AddChannelBias(float* y, int channels, size_t plane, const float* b, cudaStream_t stream);
// db[c] = sum of plane c (conv bias gradient).
void SumChannels(const float* dy, int channels, size_t plane, float* db, cudaStream_t stream);

// Conv2D::Im2Col on the device: col is (cin*k*k) x (batch*h*w); row
// (ci, kh, kw) holds input plane ci shifted by (kh - k/2, kw - k/2), with
// zeros where the source pixel lies outside its image ('same' padding).
void Im2Col(const float* x, int batch, int h, int w, int cin, int k, float* col,
            cudaStream_t stream);
// Its adjoint (Conv2D::Col2Im): dx (cin x batch x h x w) = sum over the
// k*k rows of each channel of col, shifted back. Overwrites dx.
void Col2Im(const float* col, int batch, int h, int w, int cin, int k, float* dx,
            cudaStream_t stream);

// Relu::Forward (in place) and Relu::Backward (dy *= y > 0).
void ReluForward(float* x, size_t n, cudaStream_t stream);
void ReluBackward(const float* y, float* dy, size_t n, cudaStream_t stream);

// MaxPool2x2 over `planes` planes of h x w (h, w even): y is planes x
// h/2 x w/2, arg the winner 0..3 of each window ((0,0) (0,1) (1,0) (1,1),
// first on ties). Backward routes dy to the winners and zeroes the rest of dx.
void MaxPoolForward(const float* x, size_t planes, int h, int w, float* y, uint8_t* arg,
                    cudaStream_t stream);
void MaxPoolBackward(const float* dy, const uint8_t* arg, size_t planes, int h, int w, float* dx,
                     cudaStream_t stream);

// SoftmaxCrossEntropy on batch x classes logits: row_loss[i] =
// logsumexp(z_i) - z_i[label_i] (in double) and, when grad is not null,
// grad = (softmax(z) - onehot(label)) * grad_scale. Labels must be < classes.
void SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int batch, int classes,
                         float grad_scale, double* row_loss, float* grad, cudaStream_t stream);
// predictions[i] = index of the largest logit of row i (first on ties).
void Argmax(const float* logits, int batch, int classes, uint8_t* predictions, cudaStream_t stream);

// The CNN flatten: x (channels x batch x plane, CNHW) -> rows (batch x
// channels*plane, feature c*plane + s), and back.
void CnhwToRows(const float* x, int channels, int batch, int plane, float* rows,
                cudaStream_t stream);
void RowsToCnhw(const float* rows, int channels, int batch, int plane, float* x,
                cudaStream_t stream);

}  // namespace kubeps::trainer::cuda

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_KERNELS_H_
