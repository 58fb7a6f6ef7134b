// Every layer of the CUDA backend against its CPU class on the same inputs:
// forward outputs and backward gradients (cuda_layers.h runs the very
// device functions the CUDA models use). Needs a CUDA device; skipped
// otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "worker-agent/trainer/conv2d.h"
#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/dense.h"
#include "worker-agent/trainer/max_pool.h"
#include "worker-agent/trainer/relu.h"
#include "worker-agent/trainer/softmax_cross_entropy.h"
#if KUBEPS_HAVE_CUDA
#include "worker-agent/trainer/cuda/cuda_layers.h"
#endif

namespace kubeps::trainer {
namespace {

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: GPU test skipped";        \
    if (CudaDeviceCount() < 1) {                                                         \
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports 0 or fails): " \
                      "GPU test skipped";                                                \
    }                                                                                    \
  } while (0)

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Parameter MakeParam(std::vector<float> value) {
  Parameter p;
  p.grad.assign(value.size(), 0.0f);
  p.value = std::move(value);
  return p;
}

// |gpu - cpu| <= atol + rtol * |cpu| element-wise, with atol relative to the
// largest |cpu|: float results that differ only in summation order pass, a
// wrong index or layout does not.
void ExpectClose(const std::vector<float>& gpu, const float* cpu, size_t n, const std::string& what,
                 float rtol = 1e-4f, float atol_rel = 1e-5f) {
  ASSERT_EQ(gpu.size(), n) << what;
  float scale = 0.0f;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(cpu[i]));
  const float atol = atol_rel * scale + 1e-30f;
  size_t bad = 0, first = 0;
  float worst = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float err = std::fabs(gpu[i] - cpu[i]);
    worst = std::max(worst, err);
    if (err > atol + rtol * std::fabs(cpu[i])) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " differ; first at " << first
                     << " gpu=" << gpu[first] << " cpu=" << cpu[first] << ", max |err| " << worst
                     << " (scale " << scale << ")";
}

#if KUBEPS_HAVE_CUDA

TEST(CudaLayersTest, DenseForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  for (auto [batch, in, out] :
       {std::tuple{7, 33, 5}, std::tuple{16, 784, 256}, std::tuple{3, 1, 1}}) {
    const std::string what =
        "dense " + std::to_string(batch) + "x" + std::to_string(in) + "->" + std::to_string(out);
    Parameter w = MakeParam(RandomVector(rng, static_cast<size_t>(in) * out, -0.5f, 0.5f));
    Parameter b = MakeParam(RandomVector(rng, out, -0.5f, 0.5f));
    const std::vector<float> x = RandomVector(rng, static_cast<size_t>(batch) * in, -1.0f, 1.0f);
    const std::vector<float> dy = RandomVector(rng, static_cast<size_t>(batch) * out, -1.0f, 1.0f);
    Dense cpu(in, out);
    cpu.Bind(&w, &b);
    const float* y = cpu.Forward(x.data(), batch);
    ExpectClose(cuda_layers::DenseForward(x, w.value, b.value, batch, in, out), y,
                static_cast<size_t>(batch) * out, what + " y");
    const float* dx = cpu.Backward(dy.data(), true);
    const cuda_layers::DenseGrads g = cuda_layers::DenseBackward(x, w.value, dy, batch, in, out);
    ExpectClose(g.dw, w.grad.data(), w.grad.size(), what + " dW");
    ExpectClose(g.db, b.grad.data(), b.grad.size(), what + " db");
    ExpectClose(g.dx, dx, static_cast<size_t>(batch) * in, what + " dx");
  }
}

TEST(CudaLayersTest, Conv2DForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2);
  struct Case {
    int batch, h, w, cin, cout, k;
  };
  // The two convolutions of the CNN, plus a non-square one with k = 3.
  for (const Case& c :
       {Case{3, 28, 28, 1, 32, 5}, Case{2, 14, 14, 32, 64, 5}, Case{2, 6, 10, 3, 4, 3}}) {
    const std::string what = "conv " + std::to_string(c.cin) + "->" + std::to_string(c.cout) +
                             " on " + std::to_string(c.h) + "x" + std::to_string(c.w);
    const size_t p = static_cast<size_t>(c.batch) * c.h * c.w;
    Parameter w =
        MakeParam(RandomVector(rng, static_cast<size_t>(c.cout) * c.cin * c.k * c.k, -0.3f, 0.3f));
    Parameter b = MakeParam(RandomVector(rng, c.cout, -0.5f, 0.5f));
    const std::vector<float> x = RandomVector(rng, c.cin * p, -1.0f, 1.0f);
    const std::vector<float> dy = RandomVector(rng, c.cout * p, -1.0f, 1.0f);
    Conv2D cpu(c.h, c.w, c.cin, c.cout, c.k);
    cpu.Bind(&w, &b);
    const float* y = cpu.Forward(x.data(), c.batch);
    ExpectClose(
        cuda_layers::Conv2DForward(x, w.value, b.value, c.batch, c.h, c.w, c.cin, c.cout, c.k), y,
        c.cout * p, what + " y");
    const float* dx = cpu.Backward(dy.data(), true);
    const cuda_layers::ConvGrads g =
        cuda_layers::Conv2DBackward(x, w.value, b.value, dy, c.batch, c.h, c.w, c.cin, c.cout, c.k);
    ExpectClose(g.dw, w.grad.data(), w.grad.size(), what + " dW");
    ExpectClose(g.db, b.grad.data(), b.grad.size(), what + " db");
    ExpectClose(g.dx, dx, c.cin * p, what + " dx");
  }
}

TEST(CudaLayersTest, MaxPoolForwardAndBackwardIncludingTies) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  const int batch = 3, h = 6, w = 8, channels = 4;
  const size_t in_n = static_cast<size_t>(channels) * batch * h * w;
  // Small integers: many windows hold ties, which must pick the same winner.
  std::vector<float> x(in_n);
  std::uniform_int_distribution<int> small(-2, 2);
  for (float& v : x) v = static_cast<float>(small(rng));
  const std::vector<float> dy = RandomVector(rng, in_n / 4, -1.0f, 1.0f);
  MaxPool2x2 cpu(h, w, channels);
  const float* y = cpu.Forward(x.data(), batch);
  const float* dx = cpu.Backward(dy.data());
  const cuda_layers::PoolResult r = cuda_layers::MaxPool2x2(x, dy, batch, h, w, channels);
  ExpectClose(r.y, y, in_n / 4, "pool y", 0.0f, 0.0f);
  ExpectClose(r.dx, dx, in_n, "pool dx", 0.0f, 0.0f);
}

TEST(CudaLayersTest, Relu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(4);
  std::vector<float> x = RandomVector(rng, 100003, -1.0f, 1.0f);
  x[0] = 0.0f;
  std::vector<float> dy = RandomVector(rng, x.size(), -1.0f, 1.0f);
  std::vector<float> y = x;
  Relu::Forward(y.data(), y.size());
  ExpectClose(cuda_layers::ReluForward(x), y.data(), y.size(), "relu y", 0.0f, 0.0f);
  std::vector<float> gpu_dy = cuda_layers::ReluBackward(y, dy);
  Relu::Backward(y.data(), dy.data(), dy.size());
  ExpectClose(gpu_dy, dy.data(), dy.size(), "relu dy", 0.0f, 0.0f);
}

TEST(CudaLayersTest, SoftmaxCrossEntropyAndArgmax) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  const int batch = 37, classes = 10;
  std::vector<float> logits = RandomVector(rng, static_cast<size_t>(batch) * classes, -8.0f, 8.0f);
  logits[3] = logits[4] = 50.0f;  // a tie in row 0 (first wins), and a large logit
  std::vector<uint8_t> labels(batch);
  for (uint8_t& l : labels) l = static_cast<uint8_t>(rng() % classes);
  SoftmaxCrossEntropy cpu(classes);
  const float loss = cpu.Forward(logits.data(), labels.data(), batch);
  const float* grad = cpu.Backward();
  std::vector<uint8_t> argmax(batch);
  SoftmaxCrossEntropy::Argmax(logits.data(), batch, classes, argmax.data());
  const cuda_layers::LossResult r =
      cuda_layers::SoftmaxCrossEntropy(logits, labels, batch, classes);
  EXPECT_NEAR(r.loss, loss, 1e-5f * std::fabs(loss) + 1e-6f);
  ExpectClose(r.grad, grad, static_cast<size_t>(batch) * classes, "softmax grad");
  EXPECT_EQ(r.argmax, argmax);
}

TEST(CudaLayersTest, CnnFlattenMatchesPyTorchOrder) {
  SKIP_WITHOUT_GPU();
  const int channels = 64, batch = 3, plane = 49;
  std::vector<float> x(static_cast<size_t>(channels) * batch * plane);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const std::vector<float> rows = cuda_layers::CnhwToRows(x, channels, batch, plane);
  ASSERT_EQ(rows.size(), x.size());
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < channels; ++c) {
      for (int s = 0; s < plane; ++s) {
        ASSERT_EQ(rows[static_cast<size_t>(n) * channels * plane + c * plane + s],
                  x[(static_cast<size_t>(c) * batch + n) * plane + s]);
      }
    }
  }
  EXPECT_EQ(cuda_layers::RowsToCnhw(rows, channels, batch, plane), x);
}

#else  // !KUBEPS_HAVE_CUDA

TEST(CudaLayersTest, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA: GPU test skipped"; }

#endif

}  // namespace
}  // namespace kubeps::trainer
