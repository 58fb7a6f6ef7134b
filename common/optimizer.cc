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
//
// Each loop is built twice, for AVX2 and for the baseline x86-64 (SSE2), and
// the loader picks the one the processor runs (GCC's target_clones): Adam's
// divisions and square root take half the time in 8-wide vectors, and Adam
// is most of a parameter server's work. Both builds do the same IEEE
// operations on each element (no fused multiply-add: AVX2 is asked for, FMA
// is not), so a server's results do not depend on its processor.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KUBEPS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KUBEPS_VECTOR_CLONES
#endif

KUBEPS_VECTOR_CLONES void SgdLoop(const float* from, float* to, const float* __restrict g, size_t n,
                                  float lr, float wd) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) to[i] = from[i] - lr * (g[i] + wd * from[i]);
}

KUBEPS_VECTOR_CLONES void MomentumLoop(const float* from, float* to, const float* __restrict g,
                                       float* __restrict v, size_t n, float lr, float wd,
                                       float mu) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) {
    float grad = g[i] + wd * from[i];
    v[i] = mu * v[i] + grad;
    to[i] = from[i] - lr * v[i];
  }
}

struct AdamStep {
  float beta1, beta2, lr, wd, epsilon;
  float correction1, correction2;  // 1 - beta^t of this step
};

KUBEPS_VECTOR_CLONES void AdamLoop(const float* from, float* to, const float* __restrict g,
                                   float* __restrict m, float* __restrict v, size_t n, AdamStep a) {
  const float beta1 = a.beta1, beta2 = a.beta2, lr = a.lr, wd = a.wd, epsilon = a.epsilon;
  const float correction1 = a.correction1, correction2 = a.correction2;
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

constexpr double kPi = 3.14159265358979323846;

// Plain SGD with L2 weight decay: w -= lr * (g + wd * w).
class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : c_(c) {}
  void UpdateRange(const float* from, float* to, const float* g, size_t begin, size_t end,
                   OptimizerState* state) const override {
    SgdLoop(from + begin, to + begin, g + begin, end - begin, LearningRateAt(c_, state->steps),
            c_.weight_decay);
  }

 private:
  OptimizerConfig c_;
};

// Heavy-ball momentum as PyTorch defines it: v = mu * v + g'; w -= lr * v.
class Momentum : public Optimizer {
 public:
  explicit Momentum(const OptimizerConfig& c) : c_(c) {}
  void BeginStep(size_t n, OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    ++state->steps;
  }
  void UpdateRange(const float* from, float* to, const float* g, size_t begin, size_t end,
                   OptimizerState* state) const override {
    MomentumLoop(from + begin, to + begin, g + begin, state->slot1.data() + begin, end - begin,
                 LearningRateAt(c_, state->steps), c_.weight_decay, c_.momentum);
  }

 private:
  OptimizerConfig c_;
};

// Adam (Kingma & Ba) with bias correction and L2 weight decay folded into g.
class Adam : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c) : c_(c) {}
  void BeginStep(size_t n, OptimizerState* state) const override {
    state->slot1.resize(n, 0.0f);
    state->slot2.resize(n, 0.0f);
    ++state->steps;
  }
  void UpdateRange(const float* from, float* to, const float* g, size_t begin, size_t end,
                   OptimizerState* state) const override {
    const float t = static_cast<float>(state->steps);
    const AdamStep step{c_.beta1,
                        c_.beta2,
                        LearningRateAt(c_, state->steps),
                        c_.weight_decay,
                        c_.epsilon,
                        1.0f - std::pow(c_.beta1, t),
                        1.0f - std::pow(c_.beta2, t)};
    AdamLoop(from + begin, to + begin, g + begin, state->slot1.data() + begin,
             state->slot2.data() + begin, end - begin, step);
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
  void UpdateRange(const float*, float* to, const float* g, size_t begin, size_t end,
                   OptimizerState*) const override {
    std::copy(g + begin, g + end, to + begin);
  }
  bool OnlyAverages() const override { return true; }
};

}  // namespace

float LearningRateAt(const OptimizerConfig& config, uint64_t update) {
  const LearningRateSchedule& s = config.schedule;
  if (update <= s.warmup_steps) {
    if (update == s.warmup_steps) return config.learning_rate;  // no warmup, or its last update
    return static_cast<float>(double{config.learning_rate} * static_cast<double>(update) /
                              static_cast<double>(s.warmup_steps));
  }
  if (s.decay == "none" || s.decay_steps == 0) return config.learning_rate;
  const uint64_t into = update - s.warmup_steps;  // 1 for the first update after warmup
  if (into >= s.decay_steps) return s.min_learning_rate;
  const double done = static_cast<double>(into) / static_cast<double>(s.decay_steps);
  const double left = s.decay == "cosine" ? 0.5 * (1.0 + std::cos(kPi * done)) : 1.0 - done;
  return static_cast<float>(s.min_learning_rate +
                            (double{config.learning_rate} - s.min_learning_rate) * left);
}

void Optimizer::Apply(const float* from, float* to, const float* grad, size_t n,
                      OptimizerState* state) const {
  ApplyInRanges(from, to, grad, n, state, [](size_t n, const auto& range) { range(0, n); });
}

void Optimizer::ApplyInRanges(const float* from, float* to, const float* grad, size_t n,
                              OptimizerState* state, const RangeRunner& run) const {
  BeginStep(n, state);
  run(n, [&](size_t begin, size_t end) {
    ScopedFlushDenormals flush;  // per thread: the floating-point mode is each thread's own
    UpdateRange(from, to, grad, begin, end, state);
  });
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
