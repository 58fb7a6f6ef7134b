#include "common/optimizer.h"

#include <algorithm>
#include <cmath>

#include "common/denormals.h"

namespace kubeps {
namespace {

// The update loops read their hyperparameters into locals and take
// restrict pointers, so that the compiler need not reload them after every
// store, and this file is compiled with -fno-math-errno (common/CMakeLists),
// so that std::sqrt does not block vectorisation: the same operations in
// the same order on each element, so the results are the same, bit for bit.
// The weights are read from `from` and written to `to`, which are the same
// array or disjoint ones: no element is written before it is read, so the
// loops carry no dependence from one element to the next (ivdep tells GCC
// so, as restrict cannot for two pointers that may be equal).

// Plain SGD with L2 weight decay: w -= lr * (g + wd * w).
class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : c_(c) {}
  void Update(const float* from, float* to, const float* __restrict g, size_t n,
              OptimizerState* state) const override {
    const float lr = c_.learning_rate, wd = c_.weight_decay;
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) to[i] = from[i] - lr * (g[i] + wd * from[i]);
    ++state->steps;
  }

 private:
  OptimizerConfig c_;
};

// Heavy-ball momentum as PyTorch defines it: v = mu * v + g'; w -= lr * v.
class Momentum : public Optimizer {
 public:
  explicit Momentum(const OptimizerConfig& c) : c_(c) {}
  void Update(const float* from, float* to, const float* __restrict g, size_t n,
              OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    float* __restrict v = state->slot1.data();
    const float lr = c_.learning_rate, wd = c_.weight_decay, mu = c_.momentum;
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) {
      float grad = g[i] + wd * from[i];
      v[i] = mu * v[i] + grad;
      to[i] = from[i] - lr * v[i];
    }
    ++state->steps;
  }

 private:
  OptimizerConfig c_;
};

// Adam (Kingma & Ba) with bias correction and L2 weight decay folded into g.
class Adam : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c) : c_(c) {}
  void Update(const float* from, float* to, const float* __restrict g, size_t n,
              OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    state->slot2.resize(n, 0.0f);
    const uint64_t t = ++state->steps;
    const float correction1 = 1.0f - std::pow(c_.beta1, static_cast<float>(t));
    const float correction2 = 1.0f - std::pow(c_.beta2, static_cast<float>(t));
    float* __restrict m = state->slot1.data();
    float* __restrict v = state->slot2.data();
    const float beta1 = c_.beta1, beta2 = c_.beta2, lr = c_.learning_rate, wd = c_.weight_decay,
                epsilon = c_.epsilon;
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) {
      float grad = g[i] + wd * from[i];
      m[i] = beta1 * m[i] + (1.0f - beta1) * grad;
      v[i] = beta2 * v[i] + (1.0f - beta2) * grad * grad;
      float m_hat = m[i] / correction1;
      float v_hat = v[i] / correction2;
      to[i] = from[i] - lr * m_hat / (std::sqrt(v_hat) + epsilon);
    }
  }

 private:
  OptimizerConfig c_;
};

// No update rule: the part's value becomes the averaged gradient, so a pull
// answers the mean of the workers' gradients. For a training process that
// runs its own optimizer and uses the servers only to average (the sidecar's
// `optimizer: none`, an allreduce through the parameter servers). In async
// mode there is nothing to average: the value is the latest push.
class AverageOnly : public Optimizer {
 public:
  void Update(const float*, float* to, const float* g, size_t n,
              OptimizerState* state) const override {
    std::copy(g, g + n, to);
    ++state->steps;
  }
};

}  // namespace

void Optimizer::Apply(const float* from, float* to, const float* grad, size_t n,
                      OptimizerState* state) const {
  ScopedFlushDenormals flush;
  Update(from, to, grad, n, state);
}

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerConfig& config, std::string* error) {
  if (config.name == "sgd") return std::make_unique<Sgd>(config);
  if (config.name == "momentum") return std::make_unique<Momentum>(config);
  if (config.name == "adam") return std::make_unique<Adam>(config);
  if (config.name == "none") return std::make_unique<AverageOnly>();
  if (error) {
    *error = "unknown optimizer \"" + config.name + "\" (want sgd, momentum, adam or none)";
  }
  return nullptr;
}

}  // namespace kubeps
