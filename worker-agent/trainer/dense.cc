#include "worker-agent/trainer/dense.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cassert>
#include <cstring>

#include "worker-agent/trainer/buffer.h"
#include "worker-agent/trainer/layer_math.h"

namespace kubeps::trainer {

namespace {

// C = A B (row-major, A and B transposed where asked) through oneDNN's GEMM,
// the library the convolutions already use. It picks its kernels for the
// processor it runs on (AVX-512 where there is AVX-512), where Debian's
// OpenBLAS 0.3.21 runs its AVX2 kernels on processors newer than it knows:
// 2x as fast for every shape of the built-in models on a 2-core AMD EPYC
// (docs/performance.md, "Dense layers on oneDNN"). The same OpenMP pool, so
// the thread count openblas_set_num_threads() sets holds here too. A failure
// (only for arguments no caller passes) throws dnnl::error, as a convolution's.
void Gemm(char transa, char transb, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, float* c, int ldc) {
  dnnl::error::wrap_c_api(dnnl_sgemm(transa, transb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc),
                          "dense layer: dnnl_sgemm");
}

}  // namespace

Dense::Dense(int in_features, int out_features) : in_(in_features), out_(out_features) {}

void Dense::Bind(Parameter* weight, Parameter* bias) {
  assert(weight->value.size() == static_cast<size_t>(in_) * out_);
  assert(bias->value.size() == static_cast<size_t>(out_));
  weight_ = weight;
  bias_ = bias;
}

float* Dense::Forward(const float* x, int batch) {
  x_ = x;
  batch_ = batch;
  float* y = EnsureSize(y_, static_cast<size_t>(batch) * out_);
  Gemm('N', 'N', batch, out_, in_, x, in_, weight_->value.data(), out_, y, out_);
  AddRowVector(y, batch, out_, bias_->value.data());
  return y;
}

float* Dense::Backward(const float* dy, bool need_input_grad) {
  weight_->grad.resize(weight_->value.size());
  bias_->grad.resize(bias_->value.size());
  // dW = x^T dy  (in x out)
  Gemm('T', 'N', in_, out_, batch_, x_, in_, dy, out_, weight_->grad.data(), out_);
  SumRows(dy, batch_, out_, bias_->grad.data());
  if (!need_input_grad) return nullptr;
  // dx = dy W^T  (batch x in)
  float* dx = EnsureSize(dx_, static_cast<size_t>(batch_) * in_);
  Gemm('N', 'T', batch_, in_, out_, dy, out_, weight_->value.data(), out_, dx, in_);
  return dx;
}

}  // namespace kubeps::trainer
