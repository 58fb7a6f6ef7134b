// The built-in models: names and parameter layout, finite-difference checks
// of the whole-model gradients on a tiny batch, and determinism.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
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
       {{"conv1.weight", {5, 5, 1, 32}},
        {"conv1.bias", {32}},
        {"conv2.weight", {5, 5, 32, 64}},
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
    const std::vector<float>& w = a->parameters()[0].value;
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
  std::vector<float>& v = m.parameters()[param].value;
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
};

class ModelGradientTest : public ::testing::TestWithParam<GradCheckCase> {};

// For every parameter tensor: the 8 coordinates with the largest gradient
// and 8 random ones with a gradient of at least 1% of the largest must
// match central differences to 1e-2 relative error (plus 2e-5 absolute for
// the float rounding of the loss). ReLU kinks can make single coordinates
// disagree, so at most one coordinate in 16 may miss per tensor.
TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  const GradCheckCase c = GetParam();
  const Batch batch = RandomBatch(12, c.batch);
  auto m = MakeModel(c.model);
  m->Initialize(13);
  // Non-zero biases, so the bias gradients of hidden layers are exercised
  // with inputs that are not exactly the initial state.
  std::mt19937_64 rng(14);
  for (Parameter& p : m->parameters()) {
    if (p.shape.size() == 1) {
      for (float& x : p.value) x = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 0.2 - 0.1);
    }
  }
  m->ForwardBackward(batch.images.data(), batch.labels.data(), c.batch);
  std::vector<std::vector<float>> grads;
  for (const Parameter& p : m->parameters()) grads.push_back(p.grad);

  for (size_t t = 0; t < grads.size(); ++t) {
    const std::vector<float>& g = grads[t];
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::fabs(g[a]) > std::fabs(g[b]) || (std::fabs(g[a]) == std::fabs(g[b]) && a < b);
    });
    const double gmax = std::fabs(g[order[0]]);
    ASSERT_GT(gmax, 0.0) << m->parameters()[t].name << " has an all-zero gradient";
    std::vector<size_t> coords(order.begin(), order.begin() + std::min<size_t>(8, g.size()));
    for (int tries = 0; coords.size() < std::min<size_t>(16, g.size()) && tries < 10000; ++tries) {
      const size_t i = rng() % g.size();
      if (std::fabs(g[i]) >= 0.01 * gmax && std::find(coords.begin(), coords.end(), i) == coords.end()) {
        coords.push_back(i);
      }
    }
    int misses = 0;
    double worst = 0.0;
    for (size_t i : coords) {
      const double num = NumericalDerivative(*m, batch, c.batch, t, i, c.eps);
      const double err = std::fabs(num - g[i]);
      const double rel = err / std::max(std::fabs(num), std::fabs(static_cast<double>(g[i])));
      if (err > 1e-2 * std::max(std::fabs(num), std::fabs(static_cast<double>(g[i]))) + 2e-5) {
        ++misses;
        ADD_FAILURE_AT(__FILE__, __LINE__) << "note: " << c.model << " " << m->parameters()[t].name
                                           << "[" << i << "] analytic " << g[i] << " numerical "
                                           << num;
      } else {
        worst = std::max(worst, rel);
      }
    }
    EXPECT_LE(misses, 0) << c.model << " " << m->parameters()[t].name;
    RecordProperty(m->parameters()[t].name + ".worst_rel_error", std::to_string(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGradientTest,
                         ::testing::Values(GradCheckCase{"softmax", 4, 1e-2f},
                                           GradCheckCase{"mlp", 4, 1e-3f},
                                           GradCheckCase{"cnn", 2, 1e-3f}),
                         [](const auto& info) { return info.param.model; });

// The directional derivative along a random direction over all parameters
// at once: (L(w + h d) - L(w - h d)) / 2h against grad . d.
TEST(ModelGradientTest, DirectionalDerivativeMatches) {
  for (const std::string& name : ModelNames()) {
    const Batch batch = RandomBatch(15, 3);
    auto m = MakeModel(name);
    m->Initialize(16);
    m->ForwardBackward(batch.images.data(), batch.labels.data(), 3);
    std::mt19937_64 rng(17);
    std::vector<std::vector<float>> dir;
    double analytic = 0.0;
    for (const Parameter& p : m->parameters()) {
      std::vector<float> d(p.value.size());
      for (size_t i = 0; i < d.size(); ++i) {
        d[i] = (rng() & 1) ? 1.0f : -1.0f;
        analytic += static_cast<double>(d[i]) * p.grad[i];
      }
      dir.push_back(std::move(d));
    }
    const std::vector<Parameter> saved = m->parameters();
    auto loss_at = [&](double h) {
      for (size_t t = 0; t < dir.size(); ++t) {
        std::vector<float>& v = m->parameters()[t].value;
        for (size_t i = 0; i < v.size(); ++i) v[i] = saved[t].value[i] + static_cast<float>(h) * dir[t][i];
      }
      return static_cast<double>(m->ForwardLoss(batch.images.data(), batch.labels.data(), 3, nullptr));
    };
    const double h = 1e-4;
    const double numerical = (loss_at(h) - loss_at(-h)) / (2 * h);
    EXPECT_NEAR(numerical, analytic, 2e-2 * std::fabs(analytic) + 1e-3) << name;
  }
}

}  // namespace
}  // namespace kubeps::trainer
