// The built-in models: names and parameter layout, finite-difference checks
// of the whole-model gradients on a tiny batch, and determinism.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {
namespace {

const bool kSingleBlasThread = [] {
  openblas_set_num_threads(1);
  return true;
}();

struct Batch {
  std::vector<float> images;
  std::vector<uint8_t> labels;
};

Batch RandomBatch(uint64_t seed, int batch) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  Batch b;
  b.images.resize(static_cast<size_t>(batch) * 784);
  for (float& x : b.images) x = pixel(rng);
  b.labels.resize(batch);
  for (uint8_t& y : b.labels) y = static_cast<uint8_t>(rng() % 10);
  return b;
}

size_t ParameterCount(Model& m) {
  size_t n = 0;
  for (const Parameter& p : m.parameters()) n += p.value.size();
  return n;
}

TEST(ModelsTest, NamesAndFactory) {
  EXPECT_EQ(ModelNames(), (std::vector<std::string>{"softmax", "mlp", "cnn"}));
  for (const std::string& name : ModelNames()) EXPECT_NE(MakeModel(name), nullptr) << name;
  EXPECT_EQ(MakeModel("resnet"), nullptr);
  EXPECT_EQ(MakeModel(""), nullptr);
}

TEST(ModelsTest, ParameterLayout) {
  struct Expected {
    std::string name;
    std::vector<int> shape;
  };
  const std::vector<std::pair<std::string, std::vector<Expected>>> cases = {
      {"softmax", {{"dense.weight", {784, 10}}, {"dense.bias", {10}}}},
      {"mlp",
       {{"dense1.weight", {784, 256}},
        {"dense1.bias", {256}},
        {"dense2.weight", {256, 10}},
        {"dense2.bias", {10}}}},
      {"cnn",
       {{"conv1.weight", {32, 1, 5, 5}},
        {"conv1.bias", {32}},
        {"conv2.weight", {64, 32, 5, 5}},
        {"conv2.bias", {64}},
        {"dense1.weight", {3136, 1024}},
        {"dense1.bias", {1024}},
        {"dense2.weight", {1024, 10}},
        {"dense2.bias", {10}}}},
  };
  for (const auto& [model_name, expected] : cases) {
    auto model = MakeModel(model_name);
    auto& params = model->parameters();
    ASSERT_EQ(params.size(), expected.size()) << model_name;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].name, expected[i].name);
      EXPECT_EQ(params[i].shape, expected[i].shape);
      size_t n = 1;
      for (int d : expected[i].shape) n *= d;
      EXPECT_EQ(params[i].value.size(), n);
      EXPECT_EQ(params[i].grad.size(), n);
    }
  }
  EXPECT_EQ(ParameterCount(*MakeModel("cnn")), 3274634u);
}

TEST(ModelsTest, InitializationIsDeterministicAndSeeded) {
  for (const std::string& name : ModelNames()) {
    auto a = MakeModel(name), b = MakeModel(name), c = MakeModel(name);
    a->Initialize(42);
    b->Initialize(42);
    c->Initialize(43);
    bool any_difference = false;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      EXPECT_EQ(a->parameters()[i].value, b->parameters()[i].value) << name << " " << i;
      any_difference |= a->parameters()[i].value != c->parameters()[i].value;
    }
    EXPECT_TRUE(any_difference) << name;
    // Weights are not all zero, and fit the He / Glorot bound (< 0.9 here).
    const auto& w = a->parameters()[0].value;
    EXPECT_GT(*std::max_element(w.begin(), w.end()), 0.0f);
    for (float x : w) ASSERT_LT(std::fabs(x), 0.9f);
  }
}

TEST(ModelsTest, ForwardBackwardIsBitIdentical) {
  const Batch batch = RandomBatch(5, 16);
  for (const std::string& name : ModelNames()) {
    auto a = MakeModel(name), b = MakeModel(name);
    a->Initialize(7);
    b->Initialize(7);
    const float la = a->ForwardBackward(batch.images.data(), batch.labels.data(), 16);
    const float lb = b->ForwardBackward(batch.images.data(), batch.labels.data(), 16);
    EXPECT_EQ(std::memcmp(&la, &lb, sizeof(float)), 0) << name;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      EXPECT_EQ(a->parameters()[i].grad, b->parameters()[i].grad) << name << " " << i;
    }
    // The same model again, after another batch size went through it.
    const Batch other = RandomBatch(6, 3);
    a->ForwardBackward(other.images.data(), other.labels.data(), 3);
    const float la2 = a->ForwardBackward(batch.images.data(), batch.labels.data(), 16);
    EXPECT_EQ(std::memcmp(&la, &la2, sizeof(float)), 0) << name;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      EXPECT_EQ(a->parameters()[i].grad, b->parameters()[i].grad) << name << " " << i;
    }
  }
}

TEST(ModelsTest, DeterministicWithTwoBlasThreads) {
  const Batch batch = RandomBatch(8, 32);
  openblas_set_num_threads(2);
  auto a = MakeModel("cnn");
  a->Initialize(3);
  const float l1 = a->ForwardBackward(batch.images.data(), batch.labels.data(), 32);
  const std::vector<float> g1 = a->parameters()[2].grad;
  const float l2 = a->ForwardBackward(batch.images.data(), batch.labels.data(), 32);
  openblas_set_num_threads(1);
  EXPECT_EQ(std::memcmp(&l1, &l2, sizeof(float)), 0);
  EXPECT_EQ(a->parameters()[2].grad, g1);
}

TEST(ModelsTest, ForwardLossPredictAndForwardBackwardAgree) {
  const Batch batch = RandomBatch(9, 8);
  for (const std::string& name : ModelNames()) {
    auto m = MakeModel(name);
    m->Initialize(11);
    const float loss = m->ForwardBackward(batch.images.data(), batch.labels.data(), 8);
    const std::vector<float> grad = m->parameters().back().grad;
    std::vector<uint8_t> p1(8), p2(8);
    const float eval_loss = m->ForwardLoss(batch.images.data(), batch.labels.data(), 8, p1.data());
    m->Predict(batch.images.data(), 8, p2.data());
    EXPECT_EQ(loss, eval_loss) << name;
    EXPECT_EQ(p1, p2) << name;
    for (uint8_t p : p1) EXPECT_LT(p, 10);
    EXPECT_EQ(m->parameters().back().grad, grad) << name << ": ForwardLoss touched the grads";
    // An untrained model is close to uniform: loss near ln(10).
    EXPECT_GT(loss, 1.0f) << name;
    EXPECT_LT(loss, 5.0f) << name;
  }
}

// ---------------------------------------------------------------- gradient checks

// Central difference of the model's mean loss w.r.t. one parameter value.
double NumericalDerivative(Model& m, const Batch& b, int batch, size_t param, size_t i, float eps) {
  auto& v = m.parameters()[param].value;
  const float saved = v[i];
  const float plus = saved + eps, minus = saved - eps;
  v[i] = plus;
  const double lp = m.ForwardLoss(b.images.data(), b.labels.data(), batch, nullptr);
  v[i] = minus;
  const double lm = m.ForwardLoss(b.images.data(), b.labels.data(), batch, nullptr);
  v[i] = saved;
  return (lp - lm) / (static_cast<double>(plus) - static_cast<double>(minus));
}

struct GradCheckCase {
  std::string model;
  int batch;
  float eps;
  int min_within;  // of the 16 coordinates of a tensor, how many must be within 1e-2
};

void PrintTo(const GradCheckCase& c, std::ostream* os) {
  *os << c.model << " batch " << c.batch << " eps " << c.eps;
}

class ModelGradientTest : public ::testing::TestWithParam<GradCheckCase> {};

// Hidden-layer biases near +1 (most ReLUs active, few pre-activations near
// the kink at 0), the output bias near 0. Non-zero biases also make the
// bias gradients of the hidden layers non-trivial.
void SetBiasesForGradientCheck(Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto& params = m.parameters();
  for (size_t t = 0; t < params.size(); ++t) {
    if (params[t].shape.size() != 1) continue;
    const float base = t + 1 == params.size() ? 0.0f : 1.0f;
    for (float& x : params[t].value) {
      x = base + static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 0.2 - 0.1);
    }
  }
}

// For every parameter tensor: the 8 coordinates with the largest gradient
// and 8 random ones whose gradient is at least 5% of the largest are
// compared with double-precision central differences of the float loss.
// A coordinate matches when |analytic - numerical| <= 1e-2 * max(|a|, |n|)
// + 5e-7 / eps (the last term covers the float rounding of the loss, about
// 2 ulp of 2.3, divided by the step).
//
// ReLU and max-pool are not differentiable everywhere: a step can move a
// pre-activation across 0 or swap the winner of a pool window, and the CNN
// has tens of thousands of them per image, so a few coordinates of its
// convolution parameters miss by a few percent however the step is chosen
// (the misses shrink with the step until float noise takes over). So the
// CNN needs `min_within` of 16 within 1e-2, and every coordinate of every
// model must be within 15%, which still catches wiring mistakes (a wrong
// buffer, a missing ReLU mask, a factor of 2 or the batch size).
TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  const GradCheckCase c = GetParam();
  const Batch batch = RandomBatch(12, c.batch);
  auto m = MakeModel(c.model);
  m->Initialize(13);
  SetBiasesForGradientCheck(*m, 14);
  m->ForwardBackward(batch.images.data(), batch.labels.data(), c.batch);
  std::vector<std::vector<float>> grads;
  for (const Parameter& p : m->parameters()) grads.push_back(p.grad);

  std::mt19937_64 rng(15);
  const double abs_tol = 5e-7 / c.eps;
  for (size_t t = 0; t < grads.size(); ++t) {
    const std::string& name = m->parameters()[t].name;
    const std::vector<float>& g = grads[t];
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    const double gmax = std::fabs(g[order[0]]);
    ASSERT_GT(gmax, 1e-3) << c.model << " " << name << " has a (nearly) zero gradient";
    std::vector<size_t> coords;
    for (size_t k = 0; k < order.size() && coords.size() < 8; ++k) {
      if (std::fabs(g[order[k]]) >= 0.05 * gmax) coords.push_back(order[k]);
    }
    for (int tries = 0; coords.size() < 16 && tries < 100000; ++tries) {
      const size_t i = rng() % g.size();
      if (std::fabs(g[i]) >= 0.05 * gmax &&
          std::find(coords.begin(), coords.end(), i) == coords.end()) {
        coords.push_back(i);
      }
    }
    int within = 0;
    for (size_t i : coords) {
      const double a = g[i];
      const double num = NumericalDerivative(*m, batch, c.batch, t, i, c.eps);
      const double err = std::fabs(num - a);
      const double scale = std::max(std::fabs(num), std::fabs(a));
      if (err <= 1e-2 * scale + abs_tol) ++within;
      EXPECT_LE(err, 0.15 * scale + abs_tol)
          << c.model << " " << name << "[" << i << "] analytic " << a << " numerical " << num;
    }
    const int needed = std::min<int>(c.min_within, static_cast<int>(coords.size()));
    EXPECT_GE(within, needed) << c.model << " " << name << ": only " << within << " of "
                              << coords.size() << " coordinates within 1e-2";
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGradientTest,
                         ::testing::Values(GradCheckCase{"softmax", 4, 1e-2f, 16},
                                           GradCheckCase{"mlp", 4, 3e-3f, 16},
                                           GradCheckCase{"cnn", 2, 3e-3f, 10}),
                         [](const auto& info) { return info.param.model; });

// All parameters at once: L(w + h d) - L(w - h d) against
// grad . (w+ - w-), where w+ and w- are the float parameters actually used,
// along d = grad and along d = grad * (1 + r/2) with random signs r (which
// weighs every coordinate differently, so an error in any part of the
// gradient shows). h is chosen so the loss moves by about 1e-3: enough to
// be far above the float rounding of the loss, small enough that hardly any
// ReLU or pool window changes state.
TEST(ModelGradientTest, DirectionalDerivativesMatch) {
  for (const std::string& name : ModelNames()) {
    const Batch batch = RandomBatch(16, 3);
    auto m = MakeModel(name);
    m->Initialize(17);
    SetBiasesForGradientCheck(*m, 18);
    m->ForwardBackward(batch.images.data(), batch.labels.data(), 3);
    const std::vector<Parameter> saved = m->parameters();
    std::mt19937_64 rng(19);
    for (int direction = 0; direction < 2; ++direction) {
      std::vector<std::vector<float>> d;
      double gd = 0.0;
      for (const Parameter& p : saved) {
        std::vector<float> v(p.value.size());
        for (size_t i = 0; i < v.size(); ++i) {
          const float r = direction == 0 ? 0.0f : ((rng() & 1) ? 0.5f : -0.5f);
          v[i] = p.grad[i] * (1.0f + r);
          gd += static_cast<double>(p.grad[i]) * v[i];
        }
        d.push_back(std::move(v));
      }
      const float h = static_cast<float>(5e-4 / gd);
      auto loss_at = [&](float sign) {
        for (size_t t = 0; t < d.size(); ++t) {
          auto& v = m->parameters()[t].value;
          for (size_t i = 0; i < v.size(); ++i) v[i] = saved[t].value[i] + sign * h * d[t][i];
        }
        return static_cast<double>(
            m->ForwardLoss(batch.images.data(), batch.labels.data(), 3, nullptr));
      };
      const double lp = loss_at(1.0f);
      std::vector<std::vector<float>> plus;
      for (const Parameter& p : m->parameters()) plus.push_back(p.value);
      const double lm = loss_at(-1.0f);
      double analytic = 0.0;
      for (size_t t = 0; t < d.size(); ++t) {
        for (size_t i = 0; i < d[t].size(); ++i) {
          analytic += static_cast<double>(saved[t].grad[i]) *
                      (static_cast<double>(plus[t][i]) - m->parameters()[t].value[i]);
        }
      }
      const double numerical = lp - lm;
      EXPECT_NEAR(numerical, analytic, 1e-2 * std::fabs(analytic))
          << name << (direction == 0 ? " along the gradient" : " along a reweighted gradient");
      m->parameters() = saved;
    }
  }
}

}  // namespace
}  // namespace kubeps::trainer
