// The layers of the CUDA models as host functions on device pointers: the
// dense and convolution layers (cuBLAS products plus the kernels.h bias and
// im2col kernels). Both the models (device_net.cc) and the layer checks
// (cuda_layers.cc) call these, so the tests exercise the model code itself.
// All work is enqueued on `stream`, which `blas` must be bound to.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_OPS_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_OPS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace kubeps::trainer::cuda {

// Row-major C (m x n) = alpha op(A) op(B) + beta C, with the arguments and
// meaning of cblas_sgemm(CblasRowMajor, ...), so every CPU call has a
// one-to-one twin. lda, ldb, ldc are row lengths, as in cblas.
void GemmRowMajor(cublasHandle_t blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

// Dense (dense.h): x batch x in, w in x out, b out; y = x w + b (batch x out).
void DenseForward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                  const float* b, int batch, int in, int out, float* y);
// dw = x^T dy, db = column sums of dy, and dx = dy w^T when dx is not null.
void DenseBackward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                   const float* dy, int batch, int in, int out, float* dw, float* db, float* dx);

// Conv2D (conv2d.h), CNHW, 'same' padding, stride 1, odd k:
// col = im2col(x) ((cin*k*k) x (batch*h*w)), y = w col + b (cout x batch*h*w).
void ConvForward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                 const float* b, int batch, int h, int width, int cin, int cout, int k, float* col,
                 float* y);
// From the forward's col: dw = dy col^T, db = plane sums of dy, and, when dx
// is not null, dcol = w^T dy (written over col) folded back into dx.
void ConvBackward(cublasHandle_t blas, cudaStream_t stream, float* col, const float* w,
                  const float* dy, int batch, int h, int width, int cin, int cout, int k, float* dw,
                  float* db, float* dx);

}  // namespace kubeps::trainer::cuda

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_DEVICE_OPS_H_
