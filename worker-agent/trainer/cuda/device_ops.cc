#include "worker-agent/trainer/cuda/device_ops.h"

#include "worker-agent/trainer/cuda/cuda_check.h"
#include "worker-agent/trainer/cuda/kernels.h"

namespace kubeps::trainer::cuda {

// cuBLAS is column-major, and a row-major matrix is the column-major
// storage of its transpose. So the row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T: pass B first, A second, swap m and
// n; each transpose flag and leading dimension stays with its matrix.
void GemmRowMajor(cublasHandle_t blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  KUBEPS_CUBLAS_CHECK(cublasSgemm(blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                                  lda, &beta, c, ldc));
}

void DenseForward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                  const float* b, int batch, int in, int out, float* y) {
  GemmRowMajor(blas, false, false, batch, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
  AddRowVector(y, batch, out, b, stream);
}

void DenseBackward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                   const float* dy, int batch, int in, int out, float* dw, float* db, float* dx) {
  // dW = x^T dy  (in x out)
  GemmRowMajor(blas, true, false, in, out, batch, 1.0f, x, in, dy, out, 0.0f, dw, out);
  SumRows(dy, batch, out, db, stream);
  if (dx == nullptr) return;
  // dx = dy W^T  (batch x in)
  GemmRowMajor(blas, false, true, batch, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
}

void ConvForward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                 const float* b, int batch, int h, int width, int cin, int cout, int k, float* col,
                 float* y) {
  const int p = batch * h * width;
  const int kdim = cin * k * k;
  Im2Col(x, batch, h, width, cin, k, col, stream);
  // y (cout x P) = W (cout x K) col (K x P)
  GemmRowMajor(blas, false, false, cout, p, kdim, 1.0f, w, kdim, col, p, 0.0f, y, p);
  AddChannelBias(y, cout, static_cast<size_t>(p), b, stream);
}

void ConvBackward(cublasHandle_t blas, cudaStream_t stream, float* col, const float* w,
                  const float* dy, int batch, int h, int width, int cin, int cout, int k, float* dw,
                  float* db, float* dx) {
  const int p = batch * h * width;
  const int kdim = cin * k * k;
  // dW = dy col^T  (cout x K)
  GemmRowMajor(blas, false, true, cout, kdim, p, 1.0f, dy, p, col, p, 0.0f, dw, kdim);
  SumChannels(dy, cout, static_cast<size_t>(p), db, stream);
  if (dx == nullptr) return;
  // dcol = W^T dy  (K x P), over the im2col buffer.
  GemmRowMajor(blas, true, false, kdim, p, cout, 1.0f, w, kdim, dy, p, 0.0f, col, p);
  Col2Im(col, batch, h, width, cin, k, dx, stream);
}

}  // namespace kubeps::trainer::cuda
