// The kernels behind kernels.h. Each is a direct transcription of the CPU
// loop it replaces (named in kernels.h): one thread per output element, a
// grid-stride loop so any size fits any grid, no shared state between
// threads except in SumChannels' block reduction.
#include "worker-agent/trainer/cuda/kernels.h"

#include <algorithm>

#include "worker-agent/trainer/cuda/cuda_check.h"

namespace kubeps::trainer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 65535;

unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Grid-stride loop bounds: thread t handles i = t, t + stride, ...
__device__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// ------------------------------------------------------------------ biases

__global__ void AddRowVectorKernel(float* y, size_t n, int cols, const float* b) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) y[i] += b[i % cols];
}

// One thread per column, rows summed in order.
__global__ void SumRowsKernel(const float* x, int rows, int cols, float* out) {
  for (size_t c = FirstIndex(); c < static_cast<size_t>(cols); c += GridStride()) {
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += x[static_cast<size_t>(r) * cols + c];
    out[c] = s;
  }
}

__global__ void AddChannelBiasKernel(float* y, size_t n, size_t plane, const float* b) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) y[i] += b[i / plane];
}

// One block per channel: each thread sums a strided part of the plane, then
// a tree reduction in shared memory (kThreads is a power of two).
__global__ void SumChannelsKernel(const float* dy, size_t plane, float* db) {
  __shared__ float partial[kThreads];
  const float* p = dy + blockIdx.x * plane;
  float s = 0.0f;
  for (size_t j = threadIdx.x; j < plane; j += blockDim.x) s += p[j];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[blockIdx.x] = partial[0];
}

// ------------------------------------------------------------------ im2col

// col[row][j], row = (ci, kh, kw), j = (n, oh, ow) = x[ci][n][oh + dh][ow + dw]
// with (dh, dw) = (kh - k/2, kw - k/2), or 0 outside the image.
__global__ void Im2ColKernel(const float* x, int batch, int h, int w, int cin, int k, float* col) {
  const size_t plane = static_cast<size_t>(h) * w;
  const size_t p = plane * batch;
  const int taps = k * k, pad = k / 2;
  const size_t n_total = static_cast<size_t>(cin) * taps * p;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t row = i / p, j = i % p;
    const int ci = static_cast<int>(row / taps), t = static_cast<int>(row % taps);
    const int dh = t / k - pad, dw = t % k - pad;
    const size_t n = j / plane;
    const int pix = static_cast<int>(j % plane);
    const int ih = pix / w + dh, iw = pix % w + dw;
    const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < w;
    col[i] = inside ? x[ci * p + n * plane + static_cast<size_t>(ih) * w + iw] : 0.0f;
  }
}

// The adjoint: dx[ci][n][ih][iw] = sum over taps t of col[(ci, t)][n][ih - dh][iw - dw]
// for the output pixels inside the image, taps in order.
__global__ void Col2ImKernel(const float* col, int batch, int h, int w, int cin, int k, float* dx) {
  const size_t plane = static_cast<size_t>(h) * w;
  const size_t p = plane * batch;
  const int taps = k * k, pad = k / 2;
  const size_t n_total = static_cast<size_t>(cin) * p;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t ci = i / p, j = i % p;
    const size_t n = j / plane;
    const int pix = static_cast<int>(j % plane);
    const int ih = pix / w, iw = pix % w;
    float s = 0.0f;
    for (int t = 0; t < taps; ++t) {
      const int oh = ih - (t / k - pad), ow = iw - (t % k - pad);
      if (oh >= 0 && oh < h && ow >= 0 && ow < w) {
        s += col[(ci * taps + t) * p + n * plane + static_cast<size_t>(oh) * w + ow];
      }
    }
    dx[i] = s;
  }
}

// ------------------------------------------------------------------ relu

__global__ void ReluForwardKernel(float* x, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* y, float* dy, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// ------------------------------------------------------------------ max-pool

// One thread per output element; the same comparisons as MaxPool2x2::Forward.
__global__ void MaxPoolForwardKernel(const float* x, size_t planes, int h, int w, float* y,
                                     uint8_t* arg) {
  const int oh_n = h / 2, ow_n = w / 2;
  const size_t out_plane = static_cast<size_t>(oh_n) * ow_n;
  const size_t in_plane = static_cast<size_t>(h) * w;
  const size_t n_total = planes * out_plane;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t q = i / out_plane;
    const int r = static_cast<int>(i % out_plane);
    const int oh = r / ow_n, ow = r % ow_n;
    const float* r0 = x + q * in_plane + static_cast<size_t>(2 * oh) * w + 2 * ow;
    const float a = r0[0], b = r0[1], c = r0[w], d = r0[w + 1];
    float m = a;
    uint8_t k = 0;
    if (b > m) {
      m = b;
      k = 1;
    }
    if (c > m) {
      m = c;
      k = 2;
    }
    if (d > m) {
      m = d;
      k = 3;
    }
    y[i] = m;
    arg[i] = k;
  }
}

// One thread per window: writes all four inputs of its window.
__global__ void MaxPoolBackwardKernel(const float* dy, const uint8_t* arg, size_t planes, int h,
                                      int w, float* dx) {
  const int oh_n = h / 2, ow_n = w / 2;
  const size_t out_plane = static_cast<size_t>(oh_n) * ow_n;
  const size_t in_plane = static_cast<size_t>(h) * w;
  const size_t n_total = planes * out_plane;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t q = i / out_plane;
    const int r = static_cast<int>(i % out_plane);
    const int oh = r / ow_n, ow = r % ow_n;
    float* r0 = dx + q * in_plane + static_cast<size_t>(2 * oh) * w + 2 * ow;
    const float g = dy[i];
    const uint8_t a = arg[i];
    r0[0] = a == 0 ? g : 0.0f;
    r0[1] = a == 1 ? g : 0.0f;
    r0[w] = a == 2 ? g : 0.0f;
    r0[w + 1] = a == 3 ? g : 0.0f;
  }
}

// ------------------------------------------------------------------ loss

// One thread per example, the arithmetic of SoftmaxCrossEntropy::Forward
// and ::Backward: float exps, their sum in double.
__global__ void SoftmaxCrossEntropyKernel(const float* logits, const uint8_t* labels, int batch,
                                          int classes, float grad_scale, double* row_loss,
                                          float* grad) {
  for (size_t i = FirstIndex(); i < static_cast<size_t>(batch); i += GridStride()) {
    const float* z = logits + i * classes;
    float m = z[0];
    for (int c = 1; c < classes; ++c) m = z[c] > m ? z[c] : m;
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += expf(z[c] - m);
    const int label = labels[i];
    row_loss[i] = log(sum) - (static_cast<double>(z[label]) - m);
    if (grad == nullptr) continue;
    const float inv = static_cast<float>(1.0 / sum);
    float* g = grad + i * classes;
    for (int c = 0; c < classes; ++c) {
      float p = expf(z[c] - m) * inv;
      if (c == label) p -= 1.0f;
      g[c] = p * grad_scale;
    }
  }
}

__global__ void ArgmaxKernel(const float* logits, int batch, int classes, uint8_t* predictions) {
  for (size_t i = FirstIndex(); i < static_cast<size_t>(batch); i += GridStride()) {
    const float* z = logits + i * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    predictions[i] = static_cast<uint8_t>(best);
  }
}

// ------------------------------------------------------------------ flatten

// i runs over the rows layout: i = n * (channels*plane) + c * plane + s.
__global__ void CnhwToRowsKernel(const float* x, int channels, int batch, int plane, float* rows) {
  const size_t features = static_cast<size_t>(channels) * plane;
  const size_t n_total = features * batch;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t n = i / features, f = i % features;
    const size_t c = f / plane, s = f % plane;
    rows[i] = x[(c * batch + n) * plane + s];
  }
}

__global__ void RowsToCnhwKernel(const float* rows, int channels, int batch, int plane, float* x) {
  const size_t features = static_cast<size_t>(channels) * plane;
  const size_t n_total = features * batch;
  for (size_t i = FirstIndex(); i < n_total; i += GridStride()) {
    const size_t n = i / features, f = i % features;
    const size_t c = f / plane, s = f % plane;
    x[(c * batch + n) * plane + s] = rows[i];
  }
}

}  // namespace

// ------------------------------------------------------------------ launchers

void AddRowVector(float* y, int rows, int cols, const float* b, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  AddRowVectorKernel<<<Blocks(n), kThreads, 0, stream>>>(y, n, cols, b);
  KUBEPS_CUDA_CHECK_LAUNCH("AddRowVectorKernel");
}

void SumRows(const float* x, int rows, int cols, float* out, cudaStream_t stream) {
  if (cols == 0) return;
  SumRowsKernel<<<Blocks(cols), kThreads, 0, stream>>>(x, rows, cols, out);
  KUBEPS_CUDA_CHECK_LAUNCH("SumRowsKernel");
}

void AddChannelBias(float* y, int channels, size_t plane, const float* b, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(channels) * plane;
  if (n == 0) return;
  AddChannelBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(y, n, plane, b);
  KUBEPS_CUDA_CHECK_LAUNCH("AddChannelBiasKernel");
}

void SumChannels(const float* dy, int channels, size_t plane, float* db, cudaStream_t stream) {
  if (channels == 0) return;
  SumChannelsKernel<<<channels, kThreads, 0, stream>>>(dy, plane, db);
  KUBEPS_CUDA_CHECK_LAUNCH("SumChannelsKernel");
}

void Im2Col(const float* x, int batch, int h, int w, int cin, int k, float* col,
            cudaStream_t stream) {
  const size_t n = static_cast<size_t>(cin) * k * k * batch * h * w;
  if (n == 0) return;
  Im2ColKernel<<<Blocks(n), kThreads, 0, stream>>>(x, batch, h, w, cin, k, col);
  KUBEPS_CUDA_CHECK_LAUNCH("Im2ColKernel");
}

void Col2Im(const float* col, int batch, int h, int w, int cin, int k, float* dx,
            cudaStream_t stream) {
  const size_t n = static_cast<size_t>(cin) * batch * h * w;
  if (n == 0) return;
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream>>>(col, batch, h, w, cin, k, dx);
  KUBEPS_CUDA_CHECK_LAUNCH("Col2ImKernel");
}

void ReluForward(float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ReluForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n);
  KUBEPS_CUDA_CHECK_LAUNCH("ReluForwardKernel");
}

void ReluBackward(const float* y, float* dy, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(y, dy, n);
  KUBEPS_CUDA_CHECK_LAUNCH("ReluBackwardKernel");
}

void MaxPoolForward(const float* x, size_t planes, int h, int w, float* y, uint8_t* arg,
                    cudaStream_t stream) {
  const size_t n = planes * (h / 2) * (w / 2);
  if (n == 0) return;
  MaxPoolForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, planes, h, w, y, arg);
  KUBEPS_CUDA_CHECK_LAUNCH("MaxPoolForwardKernel");
}

void MaxPoolBackward(const float* dy, const uint8_t* arg, size_t planes, int h, int w, float* dx,
                     cudaStream_t stream) {
  const size_t n = planes * (h / 2) * (w / 2);
  if (n == 0) return;
  MaxPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, arg, planes, h, w, dx);
  KUBEPS_CUDA_CHECK_LAUNCH("MaxPoolBackwardKernel");
}

void SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int batch, int classes,
                         float grad_scale, double* row_loss, float* grad, cudaStream_t stream) {
  if (batch == 0) return;
  SoftmaxCrossEntropyKernel<<<Blocks(batch), kThreads, 0, stream>>>(logits, labels, batch, classes,
                                                                    grad_scale, row_loss, grad);
  KUBEPS_CUDA_CHECK_LAUNCH("SoftmaxCrossEntropyKernel");
}

void Argmax(const float* logits, int batch, int classes, uint8_t* predictions,
            cudaStream_t stream) {
  if (batch == 0) return;
  ArgmaxKernel<<<Blocks(batch), kThreads, 0, stream>>>(logits, batch, classes, predictions);
  KUBEPS_CUDA_CHECK_LAUNCH("ArgmaxKernel");
}

void CnhwToRows(const float* x, int channels, int batch, int plane, float* rows,
                cudaStream_t stream) {
  const size_t n = static_cast<size_t>(channels) * batch * plane;
  if (n == 0) return;
  CnhwToRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, channels, batch, plane, rows);
  KUBEPS_CUDA_CHECK_LAUNCH("CnhwToRowsKernel");
}

void RowsToCnhw(const float* rows, int channels, int batch, int plane, float* x,
                cudaStream_t stream) {
  const size_t n = static_cast<size_t>(channels) * batch * plane;
  if (n == 0) return;
  RowsToCnhwKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, channels, batch, plane, x);
  KUBEPS_CUDA_CHECK_LAUNCH("RowsToCnhwKernel");
}

}  // namespace kubeps::trainer::cuda
