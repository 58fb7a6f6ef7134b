// Finite-difference gradient checks for every layer of kubeps_trainer, plus
// forward passes checked against naive reference implementations.
//
// The layers compute in float; the checks form L = sum(y * r) for a fixed
// random r in double and take central differences with the step that float
// can represent exactly, so dL/dx = Backward(r) must match.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "worker-agent/trainer/conv2d.h"
#include "worker-agent/trainer/dense.h"
#include "worker-agent/trainer/max_pool.h"
#include "worker-agent/trainer/relu.h"
#include "worker-agent/trainer/softmax_cross_entropy.h"

namespace kubeps::trainer {
namespace {

const bool kSingleBlasThread = [] {
  openblas_set_num_threads(1);
  return true;
}();

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Parameter RandomParameter(std::mt19937_64& rng, std::vector<int> shape, float scale) {
  size_t n = 1;
  for (int d : shape) n *= d;
  Parameter p;
  p.shape = shape;
  p.value = RandomVector(rng, n, -scale, scale);
  p.grad.assign(n, 0.0f);
  return p;
}

double Dot(const float* y, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < r.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

// Central difference of `loss` w.r.t. v[i], v being a float array the loss
// reads. The step is the float difference actually applied.
double NumericalDerivative(float* v, size_t i, float eps, const std::function<double()>& loss) {
  const float saved = v[i];
  const float plus = saved + eps;
  const float minus = saved - eps;
  v[i] = plus;
  const double lp = loss();
  v[i] = minus;
  const double lm = loss();
  v[i] = saved;
  return (lp - lm) / (static_cast<double>(plus) - static_cast<double>(minus));
}

// Compares analytic[i] with the central difference for every coordinate.
void CheckGradient(const char* what, float* v, const float* analytic, size_t n, float eps,
                   const std::function<double()>& loss, double rel_tol = 1e-2,
                   double abs_tol = 1e-4) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double num = NumericalDerivative(v, i, eps, loss);
    const double a = analytic[i];
    const double err = std::fabs(a - num);
    const double allowed = rel_tol * std::max(std::fabs(a), std::fabs(num)) + abs_tol;
    worst = std::max(worst, err / std::max(std::fabs(num), 1e-12));
    ASSERT_LE(err, allowed) << what << "[" << i << "]: analytic " << a << " numerical " << num;
  }
  SUCCEED() << what << " worst relative error " << worst;
}

// ------------------------------------------------------------------ Dense

TEST(DenseTest, ForwardMatchesNaive) {
  std::mt19937_64 rng(1);
  const int in = 7, out = 5, batch = 3;
  Parameter w = RandomParameter(rng, {in, out}, 1.0f), b = RandomParameter(rng, {out}, 1.0f);
  std::vector<float> x = RandomVector(rng, batch * in, -1, 1);
  Dense dense(in, out);
  dense.Bind(&w, &b);
  const float* y = dense.Forward(x.data(), batch);
  for (int n = 0; n < batch; ++n) {
    for (int o = 0; o < out; ++o) {
      double ref = b.value[o];
      for (int i = 0; i < in; ++i) ref += static_cast<double>(x[n * in + i]) * w.value[i * out + o];
      EXPECT_NEAR(y[n * out + o], ref, 1e-5);
    }
  }
}

TEST(DenseTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(2);
  const int in = 7, out = 5, batch = 3;
  Parameter w = RandomParameter(rng, {in, out}, 1.0f), b = RandomParameter(rng, {out}, 1.0f);
  std::vector<float> x = RandomVector(rng, batch * in, -1, 1);
  std::vector<float> r = RandomVector(rng, batch * out, -1, 1);
  Dense dense(in, out);
  auto loss = [&] {
    dense.Bind(&w, &b);
    return Dot(dense.Forward(x.data(), batch), r);
  };
  loss();
  const float* dx = dense.Backward(r.data(), true);
  std::vector<float> dx_copy(dx, dx + x.size());
  std::vector<float> dw = w.grad, db = b.grad;
  CheckGradient("dx", x.data(), dx_copy.data(), x.size(), 1e-2f, loss);
  CheckGradient("dW", w.value.data(), dw.data(), dw.size(), 1e-2f, loss);
  CheckGradient("db", b.value.data(), db.data(), db.size(), 1e-2f, loss);
}

TEST(DenseTest, BackwardWithoutInputGradient) {
  std::mt19937_64 rng(3);
  Parameter w = RandomParameter(rng, {4, 3}, 1.0f), b = RandomParameter(rng, {3}, 1.0f);
  std::vector<float> x = RandomVector(rng, 2 * 4, -1, 1), dy = RandomVector(rng, 2 * 3, -1, 1);
  Dense dense(4, 3);
  dense.Bind(&w, &b);
  dense.Forward(x.data(), 2);
  EXPECT_EQ(dense.Backward(dy.data(), false), nullptr);
  // db is the column sum of dy.
  for (int o = 0; o < 3; ++o) EXPECT_FLOAT_EQ(b.grad[o], dy[o] + dy[3 + o]);
}

// ------------------------------------------------------------------ Conv2D

// Direct 'same' convolution in CNHW with an OIHW weight, in double.
std::vector<double> NaiveConv(const std::vector<float>& x, const Parameter& w, const Parameter& b,
                              int batch, int h, int wd, int cin, int cout, int k) {
  const int pad = k / 2;
  auto X = [&](int c, int n, int i, int j) {
    return x[((static_cast<size_t>(c) * batch + n) * h + i) * wd + j];
  };
  std::vector<double> y(static_cast<size_t>(batch) * h * wd * cout);
  for (int co = 0; co < cout; ++co)
    for (int n = 0; n < batch; ++n)
      for (int oh = 0; oh < h; ++oh)
        for (int ow = 0; ow < wd; ++ow) {
          double s = b.value[co];
          for (int ci = 0; ci < cin; ++ci)
            for (int kh = 0; kh < k; ++kh)
              for (int kw = 0; kw < k; ++kw) {
                const int ih = oh + kh - pad, iw = ow + kw - pad;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                s += static_cast<double>(X(ci, n, ih, iw)) *
                     w.value[((static_cast<size_t>(co) * cin + ci) * k + kh) * k + kw];
              }
          y[((static_cast<size_t>(co) * batch + n) * h + oh) * wd + ow] = s;
        }
  return y;
}

struct ConvCase {
  int h, w, cin, cout, k, batch;
};

class Conv2DTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DTest, ForwardMatchesNaive) {
  const ConvCase c = GetParam();
  std::mt19937_64 rng(4);
  Parameter w = RandomParameter(rng, {c.cout, c.cin, c.k, c.k}, 1.0f);
  Parameter b = RandomParameter(rng, {c.cout}, 1.0f);
  std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.batch) * c.h * c.w * c.cin, -1, 1);
  Conv2D conv(c.h, c.w, c.cin, c.cout, c.k);
  conv.Bind(&w, &b);
  const float* y = conv.Forward(x.data(), c.batch);
  const std::vector<double> ref = NaiveConv(x, w, b, c.batch, c.h, c.w, c.cin, c.cout, c.k);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-4) << "at " << i;
}

TEST_P(Conv2DTest, GradientsMatchFiniteDifferences) {
  const ConvCase c = GetParam();
  std::mt19937_64 rng(5);
  Parameter w = RandomParameter(rng, {c.cout, c.cin, c.k, c.k}, 1.0f);
  Parameter b = RandomParameter(rng, {c.cout}, 1.0f);
  std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.batch) * c.h * c.w * c.cin, -1, 1);
  std::vector<float> r =
      RandomVector(rng, static_cast<size_t>(c.batch) * c.h * c.w * c.cout, -1, 1);
  Conv2D conv(c.h, c.w, c.cin, c.cout, c.k);
  auto loss = [&] {
    conv.Bind(&w, &b);
    return Dot(conv.Forward(x.data(), c.batch), r);
  };
  loss();
  const float* dx = conv.Backward(r.data(), true);
  std::vector<float> dx_copy(dx, dx + x.size());
  std::vector<float> dw = w.grad, db = b.grad;
  CheckGradient("dx", x.data(), dx_copy.data(), x.size(), 1e-2f, loss);
  CheckGradient("dW", w.value.data(), dw.data(), dw.size(), 1e-2f, loss);
  CheckGradient("db", b.value.data(), db.data(), db.size(), 1e-2f, loss);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2DTest,
                         ::testing::Values(ConvCase{6, 5, 3, 4, 5, 2},  // kernel wider than half
                                           ConvCase{4, 4, 1, 2, 5, 1},  // kernel > image
                                           ConvCase{7, 6, 2, 3, 3, 3}, ConvCase{5, 5, 2, 2, 1, 2},
                                           ConvCase{2, 3, 2, 2, 7, 2}));  // shift > plane

TEST(Conv2DTest, BackwardWithoutInputGradientMatches) {
  std::mt19937_64 rng(6);
  Parameter w = RandomParameter(rng, {3, 1, 5, 5}, 1.0f), b = RandomParameter(rng, {3}, 1.0f);
  std::vector<float> x = RandomVector(rng, 2 * 8 * 8, -1, 1),
                     dy = RandomVector(rng, 2 * 64 * 3, -1, 1);
  Conv2D conv(8, 8, 1, 3, 5);
  conv.Bind(&w, &b);
  conv.Forward(x.data(), 2);
  conv.Backward(dy.data(), true);
  const std::vector<float> dw_full = w.grad;
  conv.Forward(x.data(), 2);
  EXPECT_EQ(conv.Backward(dy.data(), false), nullptr);
  EXPECT_EQ(w.grad, dw_full);
}

// ------------------------------------------------------------------ MaxPool

// Values with gaps of 0.05 in a random order, so a 1e-3 step never changes
// which element of a window wins.
std::vector<float> DistinctValues(std::mt19937_64& rng, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i) / 1.0f;
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
  return v;
}

TEST(MaxPoolTest, ForwardMatchesNaive) {
  std::mt19937_64 rng(7);
  const int batch = 2, h = 4, w = 6, c = 3;
  std::vector<float> x = DistinctValues(rng, batch * h * w * c);
  MaxPool2x2 pool(h, w, c);
  const float* y = pool.Forward(x.data(), batch);
  for (int n = 0; n < batch; ++n)
    for (int oh = 0; oh < h / 2; ++oh)
      for (int ow = 0; ow < w / 2; ++ow)
        for (int ch = 0; ch < c; ++ch) {
          // CNHW: plane (ch, n).
          float m = -1e30f;
          for (int dh = 0; dh < 2; ++dh)
            for (int dw = 0; dw < 2; ++dw)
              m = std::max(m, x[((ch * batch + n) * h + 2 * oh + dh) * w + 2 * ow + dw]);
          EXPECT_EQ(y[((ch * batch + n) * (h / 2) + oh) * (w / 2) + ow], m);
        }
}

TEST(MaxPoolTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(8);
  const int batch = 2, h = 4, w = 6, c = 3;
  std::vector<float> x = DistinctValues(rng, batch * h * w * c);
  std::vector<float> r = RandomVector(rng, batch * (h / 2) * (w / 2) * c, -1, 1);
  MaxPool2x2 pool(h, w, c);
  auto loss = [&] { return Dot(pool.Forward(x.data(), batch), r); };
  loss();
  const float* dx = pool.Backward(r.data());
  std::vector<float> dx_copy(dx, dx + x.size());
  CheckGradient("dx", x.data(), dx_copy.data(), x.size(), 1e-3f, loss);
}

TEST(MaxPoolTest, TiesGoToTheFirstElement) {
  const std::vector<float> x = {2, 2, 2, 2};  // 1 image, 2x2, 1 channel
  MaxPool2x2 pool(2, 2, 1);
  pool.Forward(x.data(), 1);
  const float dy = 1.5f;
  const float* dx = pool.Backward(&dy);
  EXPECT_EQ(std::vector<float>(dx, dx + 4), (std::vector<float>{1.5f, 0, 0, 0}));
}

// Backward finds each window's winner again from Forward's input: it must
// route the gradient where Forward's pick was, ties and NaN included.
TEST(MaxPoolTest, BackwardRoutesToForwardsPickForTiesAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Four windows of one 2x8 plane: rows (a b | ...) over (c d | ...).
  const std::vector<float> x = {1, 3, 0, 0, nan, 1, 4, 4,   // row 0
                                3, 2, 5, 5, 2,   3, 4, 4};  // row 1
  MaxPool2x2 pool(2, 8, 1);
  const float* y = pool.Forward(x.data(), 1);
  EXPECT_EQ(y[0], 3);
  EXPECT_EQ(y[1], 5);
  EXPECT_TRUE(std::isnan(y[2]));  // nothing compares greater than NaN
  EXPECT_EQ(y[3], 4);
  const std::vector<float> dy = {1, 2, 3, 4};
  const float* dx = pool.Backward(dy.data());
  EXPECT_EQ(std::vector<float>(dx, dx + 16), (std::vector<float>{0, 1, 0, 0, 3, 0, 4, 0,  //
                                                                 0, 0, 2, 0, 0, 0, 0, 0}));
}

// ------------------------------------------------------------------ ReLU

TEST(ReluTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(9);
  std::vector<float> x = RandomVector(rng, 40, 0.1f, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];  // half negative, none near 0
  std::vector<float> r = RandomVector(rng, x.size(), -1, 1);
  std::vector<float> y(x.size());
  auto loss = [&] {
    y = x;
    Relu::Forward(y.data(), y.size());
    return Dot(y.data(), r);
  };
  loss();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], std::max(x[i], 0.0f));
  std::vector<float> dx = r;
  Relu::Backward(y.data(), dx.data(), dx.size());
  CheckGradient("dx", x.data(), dx.data(), x.size(), 1e-3f, loss);
}

// ------------------------------------------------------------------ Softmax cross-entropy

TEST(SoftmaxCrossEntropyTest, LossMatchesReference) {
  std::mt19937_64 rng(10);
  const int batch = 4, classes = 10;
  std::vector<float> z = RandomVector(rng, batch * classes, -3, 3);
  const std::vector<uint8_t> labels = {0, 9, 3, 3};
  SoftmaxCrossEntropy ce(classes);
  double ref = 0;
  for (int i = 0; i < batch; ++i) {
    double s = 0;
    for (int c = 0; c < classes; ++c) s += std::exp(static_cast<double>(z[i * classes + c]));
    ref += -std::log(std::exp(static_cast<double>(z[i * classes + labels[i]])) / s);
  }
  EXPECT_NEAR(ce.Forward(z.data(), labels.data(), batch), ref / batch, 1e-5);
}

TEST(SoftmaxCrossEntropyTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(11);
  const int batch = 4, classes = 10;
  std::vector<float> z = RandomVector(rng, batch * classes, -3, 3);
  const std::vector<uint8_t> labels = {1, 0, 7, 9};
  SoftmaxCrossEntropy ce(classes);
  auto loss = [&] { return static_cast<double>(ce.Forward(z.data(), labels.data(), batch)); };
  loss();
  const float* dz = ce.Backward();
  std::vector<float> dz_copy(dz, dz + z.size());
  // Each row of the gradient of the mean loss sums to 0.
  for (int i = 0; i < batch; ++i) {
    double s = 0;
    for (int c = 0; c < classes; ++c) s += dz_copy[i * classes + c];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
  CheckGradient("dlogits", z.data(), dz_copy.data(), z.size(), 1e-2f, loss, 1e-2, 2e-4);
}

TEST(SoftmaxCrossEntropyTest, StableForHugeLogits) {
  const std::vector<float> z = {1e4f, -1e4f, 0.0f, 3e4f, 3e4f, 3e4f - 1};
  const std::vector<uint8_t> labels = {1, 0};
  SoftmaxCrossEntropy ce(3);
  const float loss = ce.Forward(z.data(), labels.data(), 2);
  ASSERT_TRUE(std::isfinite(loss));
  // Sample 0: -log softmax = 2e4; sample 1: log(2 + e^-1) ~ 0.8620.
  EXPECT_NEAR(loss, (2e4 + std::log(2.0 + std::exp(-1.0))) / 2, 1e-2);
  const float* g = ce.Backward();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(g[i]));
  EXPECT_NEAR(g[0], 0.5f, 1e-6);   // p = 1, not the label
  EXPECT_NEAR(g[1], -0.5f, 1e-6);  // p = 0, the label
}

TEST(SoftmaxCrossEntropyTest, ArgmaxPicksFirstOfTies) {
  const std::vector<float> z = {0, 3, 3, 1, -1, -2, -1, -5};
  std::vector<uint8_t> p(2);
  SoftmaxCrossEntropy::Argmax(z.data(), 2, 4, p.data());
  EXPECT_EQ(p, (std::vector<uint8_t>{1, 0}));
}

}  // namespace
}  // namespace kubeps::trainer
