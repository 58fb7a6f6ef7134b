#include "common/optimizer.h"

#include <algorithm>
#include <cmath>

namespace kubeps {
namespace {

// Plain SGD with L2 weight decay: w -= lr * (g + wd * w).
class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : c_(c) {}
  void Apply(float* w, const float* g, size_t n, OptimizerState* state) const override {
    for (size_t i = 0; i < n; ++i) w[i] -= c_.learning_rate * (g[i] + c_.weight_decay * w[i]);
    ++state->steps;
  }

 private:
  OptimizerConfig c_;
};

// Heavy-ball momentum as PyTorch defines it: v = mu * v + g'; w -= lr * v.
class Momentum : public Optimizer {
 public:
  explicit Momentum(const OptimizerConfig& c) : c_(c) {}
  void Apply(float* w, const float* g, size_t n, OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    float* v = state->slot1.data();
    for (size_t i = 0; i < n; ++i) {
      float grad = g[i] + c_.weight_decay * w[i];
      v[i] = c_.momentum * v[i] + grad;
      w[i] -= c_.learning_rate * v[i];
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
  void Apply(float* w, const float* g, size_t n, OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    state->slot2.resize(n, 0.0f);
    const uint64_t t = ++state->steps;
    const float correction1 = 1.0f - std::pow(c_.beta1, static_cast<float>(t));
    const float correction2 = 1.0f - std::pow(c_.beta2, static_cast<float>(t));
    float* m = state->slot1.data();
    float* v = state->slot2.data();
    for (size_t i = 0; i < n; ++i) {
      float grad = g[i] + c_.weight_decay * w[i];
      m[i] = c_.beta1 * m[i] + (1.0f - c_.beta1) * grad;
      v[i] = c_.beta2 * v[i] + (1.0f - c_.beta2) * grad * grad;
      float m_hat = m[i] / correction1;
      float v_hat = v[i] / correction2;
      w[i] -= c_.learning_rate * m_hat / (std::sqrt(v_hat) + c_.epsilon);
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
  void Apply(float* w, const float* g, size_t n, OptimizerState* state) const override {
    std::copy(g, g + n, w);
    ++state->steps;
  }
};

}  // namespace

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
