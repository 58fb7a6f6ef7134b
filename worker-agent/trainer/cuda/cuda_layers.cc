#include "worker-agent/trainer/cuda/cuda_layers.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "worker-agent/trainer/cuda/cuda_check.h"
#include "worker-agent/trainer/cuda/device_ops.h"
#include "worker-agent/trainer/cuda/kernels.h"

namespace kubeps::trainer::cuda_layers {
namespace {

using cuda::DeviceBuffer;

// Device 0, a stream and a cuBLAS handle bound to it, for one call.
class Context {
 public:
  Context() : guard_(0) {
    KUBEPS_CUDA_CHECK(cudaStreamCreate(&stream_));
    KUBEPS_CUBLAS_CHECK(cublasCreate(&blas_));
    KUBEPS_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    KUBEPS_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  }
  ~Context() {
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  void Sync() const { KUBEPS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cuda::DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

template <typename T>
T* Upload(DeviceBuffer<T>& buffer, const std::vector<T>& host) {
  T* p = buffer.Ensure(host.size() > 0 ? host.size() : 1);
  KUBEPS_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> Download(const Context& ctx, const T* device, size_t n) {
  ctx.Sync();
  std::vector<T> host(n);
  KUBEPS_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace

std::vector<float> DenseForward(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int batch, int in, int out) {
  Context ctx;
  DeviceBuffer<float> dx, dw, db, dy;
  float* y = dy.Ensure(static_cast<size_t>(batch) * out);
  cuda::DenseForward(ctx.blas(), ctx.stream(), Upload(dx, x), Upload(dw, w), Upload(db, b), batch,
                     in, out, y);
  return Download(ctx, y, static_cast<size_t>(batch) * out);
}

DenseGrads DenseBackward(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& dy, int batch, int in, int out) {
  Context ctx;
  DeviceBuffer<float> d_x, d_w, d_dy, d_dw, d_db, d_dx;
  float* dw = d_dw.Ensure(static_cast<size_t>(in) * out);
  float* db = d_db.Ensure(out);
  float* dx = d_dx.Ensure(static_cast<size_t>(batch) * in);
  cuda::DenseBackward(ctx.blas(), ctx.stream(), Upload(d_x, x), Upload(d_w, w), Upload(d_dy, dy),
                      batch, in, out, dw, db, dx);
  DenseGrads g;
  g.dw = Download(ctx, dw, static_cast<size_t>(in) * out);
  g.db = Download(ctx, db, out);
  g.dx = Download(ctx, dx, static_cast<size_t>(batch) * in);
  return g;
}

std::vector<float> Conv2DForward(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, int batch, int h, int width, int cin,
                                 int cout, int k) {
  Context ctx;
  const size_t p = static_cast<size_t>(batch) * h * width;
  DeviceBuffer<float> d_x, d_w, d_b, d_col, d_y;
  float* col = d_col.Ensure(static_cast<size_t>(cin) * k * k * p);
  float* y = d_y.Ensure(cout * p);
  cuda::ConvForward(ctx.blas(), ctx.stream(), Upload(d_x, x), Upload(d_w, w), Upload(d_b, b), batch,
                    h, width, cin, cout, k, col, y);
  return Download(ctx, y, cout * p);
}

ConvGrads Conv2DBackward(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& b, const std::vector<float>& dy, int batch,
                         int h, int width, int cin, int cout, int k) {
  Context ctx;
  const size_t p = static_cast<size_t>(batch) * h * width;
  DeviceBuffer<float> d_x, d_w, d_b, d_col, d_y, d_dy, d_dw, d_db, d_dx;
  float* col = d_col.Ensure(static_cast<size_t>(cin) * k * k * p);
  float* y = d_y.Ensure(cout * p);
  const float* wd = Upload(d_w, w);
  cuda::ConvForward(ctx.blas(), ctx.stream(), Upload(d_x, x), wd, Upload(d_b, b), batch, h, width,
                    cin, cout, k, col, y);
  float* dw = d_dw.Ensure(static_cast<size_t>(cout) * cin * k * k);
  float* db = d_db.Ensure(cout);
  float* dx = d_dx.Ensure(cin * p);
  cuda::ConvBackward(ctx.blas(), ctx.stream(), col, wd, Upload(d_dy, dy), batch, h, width, cin,
                     cout, k, dw, db, dx);
  ConvGrads g;
  g.dw = Download(ctx, dw, static_cast<size_t>(cout) * cin * k * k);
  g.db = Download(ctx, db, cout);
  g.dx = Download(ctx, dx, cin * p);
  return g;
}

PoolResult MaxPool2x2(const std::vector<float>& x, const std::vector<float>& dy, int batch, int h,
                      int width, int channels) {
  Context ctx;
  const size_t planes = static_cast<size_t>(channels) * batch;
  const size_t in_n = planes * h * width, out_n = planes * (h / 2) * (width / 2);
  DeviceBuffer<float> d_x, d_y, d_dy, d_dx;
  DeviceBuffer<uint8_t> d_arg;
  float* y = d_y.Ensure(out_n);
  uint8_t* arg = d_arg.Ensure(out_n);
  float* dx = d_dx.Ensure(in_n);
  cuda::MaxPoolForward(Upload(d_x, x), planes, h, width, y, arg, ctx.stream());
  cuda::MaxPoolBackward(Upload(d_dy, dy), arg, planes, h, width, dx, ctx.stream());
  PoolResult r;
  r.y = Download(ctx, y, out_n);
  r.dx = Download(ctx, dx, in_n);
  return r;
}

std::vector<float> ReluForward(const std::vector<float>& x) {
  Context ctx;
  DeviceBuffer<float> d_x;
  float* p = Upload(d_x, x);
  cuda::ReluForward(p, x.size(), ctx.stream());
  return Download(ctx, p, x.size());
}

std::vector<float> ReluBackward(const std::vector<float>& y, const std::vector<float>& dy) {
  Context ctx;
  DeviceBuffer<float> d_y, d_dy;
  float* g = Upload(d_dy, dy);
  cuda::ReluBackward(Upload(d_y, y), g, dy.size(), ctx.stream());
  return Download(ctx, g, dy.size());
}

LossResult SoftmaxCrossEntropy(const std::vector<float>& logits, const std::vector<uint8_t>& labels,
                               int batch, int classes) {
  Context ctx;
  DeviceBuffer<float> d_logits, d_grad;
  DeviceBuffer<uint8_t> d_labels, d_pred;
  DeviceBuffer<double> d_loss;
  const size_t n = static_cast<size_t>(batch) * classes;
  float* grad = d_grad.Ensure(n);
  double* row_loss = d_loss.Ensure(batch);
  uint8_t* pred = d_pred.Ensure(batch);
  const float* z = Upload(d_logits, logits);
  cuda::SoftmaxCrossEntropy(z, Upload(d_labels, labels), batch, classes,
                            1.0f / static_cast<float>(batch), row_loss, grad, ctx.stream());
  cuda::Argmax(z, batch, classes, pred, ctx.stream());
  LossResult r;
  double total = 0.0;
  for (double l : Download(ctx, row_loss, batch)) total += l;
  r.loss = static_cast<float>(total / batch);
  r.grad = Download(ctx, grad, n);
  r.argmax = Download(ctx, pred, batch);
  return r;
}

std::vector<float> CnhwToRows(const std::vector<float>& x, int channels, int batch, int plane) {
  Context ctx;
  DeviceBuffer<float> d_x, d_rows;
  float* rows = d_rows.Ensure(x.size());
  cuda::CnhwToRows(Upload(d_x, x), channels, batch, plane, rows, ctx.stream());
  return Download(ctx, rows, x.size());
}

std::vector<float> RowsToCnhw(const std::vector<float>& rows, int channels, int batch, int plane) {
  Context ctx;
  DeviceBuffer<float> d_rows, d_x;
  float* x = d_x.Ensure(rows.size());
  cuda::RowsToCnhw(Upload(d_rows, rows), channels, batch, plane, x, ctx.stream());
  return Download(ctx, x, rows.size());
}

}  // namespace kubeps::trainer::cuda_layers
