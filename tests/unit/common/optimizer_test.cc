// The server-side optimizers (common/optimizer.h) against steps worked out
// by hand: plain SGD, heavy-ball momentum in PyTorch's convention, Adam with
// bias correction, L2 weight decay, and the error for an unknown name.
//
// Every expectation is either a literal computed by hand or the textbook
// formula evaluated in double precision inside the test; nothing calls the
// code under test to produce an expected value.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer.h"

namespace kubeps {
namespace {

// Three elements, exactly representable in float, with mixed signs.
const std::vector<float> kW0 = {1.0f, -2.0f, 0.5f};
const std::vector<float> kG1 = {0.5f, 1.0f, -2.0f};
const std::vector<float> kG2 = {0.25f, -0.5f, 1.0f};

std::unique_ptr<Optimizer> Make(const OptimizerConfig& config) {
  std::string error;
  std::unique_ptr<Optimizer> optimizer = MakeOptimizer(config, &error);
  EXPECT_NE(optimizer, nullptr) << error;
  EXPECT_EQ(error, "");
  return optimizer;
}

// `name` at learning rate 0.3 with weight decay 0.01 (defaults otherwise).
std::unique_ptr<Optimizer> MakeWithDecay(const char* name) {
  OptimizerConfig config;
  config.name = name;
  config.learning_rate = 0.3f;
  config.weight_decay = 0.01f;
  return Make(config);
}

void ExpectNear(const std::vector<float>& actual, const std::vector<double>& expected, double tol,
                const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol) << what << " element " << i;
  }
}

TEST(OptimizerTest, SgdTwoStepsByHand) {
  OptimizerConfig config;
  config.name = "sgd";
  config.learning_rate = 0.5f;
  auto sgd = Make(config);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;

  // w1 = w0 - 0.5 * g1 = {1 - 0.25, -2 - 0.5, 0.5 + 1}
  sgd->Apply(w.data(), kG1.data(), w.size(), &state);
  EXPECT_EQ(w, (std::vector<float>{0.75f, -2.5f, 1.5f}));
  EXPECT_EQ(state.steps, 1u);

  // w2 = w1 - 0.5 * g2 = {0.75 - 0.125, -2.5 + 0.25, 1.5 - 0.5}
  sgd->Apply(w.data(), kG2.data(), w.size(), &state);
  EXPECT_EQ(w, (std::vector<float>{0.625f, -2.25f, 1.0f}));
  EXPECT_EQ(state.steps, 2u);
  // Plain SGD keeps no per-element state.
  EXPECT_TRUE(state.slot1.empty());
  EXPECT_TRUE(state.slot2.empty());
}

TEST(OptimizerTest, SgdWeightDecayAddsL2TermToGradient) {
  OptimizerConfig config;
  config.name = "sgd";
  config.learning_rate = 0.5f;
  config.weight_decay = 0.5f;
  auto sgd = Make(config);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;

  // g' = g + 0.5 * w = {0.5 + 0.5, 1 - 1, -2 + 0.25} = {1, 0, -1.75}
  // w1 = w0 - 0.5 * g' = {0.5, -2, 1.375}
  sgd->Apply(w.data(), kG1.data(), w.size(), &state);
  EXPECT_EQ(w, (std::vector<float>{0.5f, -2.0f, 1.375f}));

  // g' = g2 + 0.5 * w1 = {0.25 + 0.25, -0.5 - 1, 1 + 0.6875} = {0.5, -1.5, 1.6875}
  // w2 = w1 - 0.5 * g' = {0.25, -1.25, 0.53125}
  sgd->Apply(w.data(), kG2.data(), w.size(), &state);
  EXPECT_EQ(w, (std::vector<float>{0.25f, -1.25f, 0.53125f}));
}

TEST(OptimizerTest, ZeroGradientWithoutWeightDecayChangesNothing) {
  for (const char* name : {"sgd", "momentum", "adam"}) {
    OptimizerConfig config;
    config.name = name;
    auto optimizer = Make(config);
    ASSERT_NE(optimizer, nullptr) << name;
    std::vector<float> w = kW0;
    const std::vector<float> zero(3, 0.0f);
    OptimizerState state;
    optimizer->Apply(w.data(), zero.data(), w.size(), &state);
    optimizer->Apply(w.data(), zero.data(), w.size(), &state);
    EXPECT_EQ(w, kW0) << name;
    EXPECT_EQ(state.steps, 2u) << name;
  }
}

TEST(OptimizerTest, MomentumTwoStepsPyTorchConvention) {
  OptimizerConfig config;
  config.name = "momentum";
  config.learning_rate = 0.1f;
  config.momentum = 0.9f;
  auto momentum = Make(config);
  ASSERT_NE(momentum, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;

  // Step 1: v = 0.9 * 0 + g1 = {0.5, 1, -2}; w -= 0.1 * v.
  momentum->Apply(w.data(), kG1.data(), w.size(), &state);
  ExpectNear(state.slot1, {0.5, 1.0, -2.0}, 1e-7, "velocity after step 1");
  ExpectNear(w, {0.95, -2.1, 0.7}, 1e-6, "weights after step 1");

  // Step 2: v = 0.9 * v + g2 = {0.45 + 0.25, 0.9 - 0.5, -1.8 + 1} = {0.7, 0.4, -0.8}
  //         w -= 0.1 * v     = {0.95 - 0.07, -2.1 - 0.04, 0.7 + 0.08}
  momentum->Apply(w.data(), kG2.data(), w.size(), &state);
  ExpectNear(state.slot1, {0.7, 0.4, -0.8}, 1e-6, "velocity after step 2");
  ExpectNear(w, {0.88, -2.14, 0.78}, 1e-6, "weights after step 2");
  EXPECT_EQ(state.steps, 2u);
  // A dampened variant (v = mu v + (1 - mu) g) would give w1 = {0.995, ...}:
  // the first step must move by the full lr * g.
}

TEST(OptimizerTest, MomentumWeightDecayFoldedIntoGradient) {
  OptimizerConfig config;
  config.name = "momentum";
  config.learning_rate = 0.1f;
  config.momentum = 0.5f;
  config.weight_decay = 0.5f;
  auto momentum = Make(config);
  ASSERT_NE(momentum, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;

  // Step 1: g' = g1 + 0.5 w0 = {1, 0, -1.75}; v = g'; w1 = w0 - 0.1 v = {0.9, -2, 0.675}
  momentum->Apply(w.data(), kG1.data(), w.size(), &state);
  ExpectNear(w, {0.9, -2.0, 0.675}, 1e-6, "weights after step 1");
  // Step 2: g' = g2 + 0.5 w1 = {0.7, -1.5, 1.3375}
  //         v  = 0.5 v + g' = {1.2, -1.5, 0.4625}
  //         w2 = w1 - 0.1 v = {0.78, -1.85, 0.62875}
  momentum->Apply(w.data(), kG2.data(), w.size(), &state);
  ExpectNear(state.slot1, {1.2, -1.5, 0.4625}, 1e-6, "velocity after step 2");
  ExpectNear(w, {0.78, -1.85, 0.62875}, 1e-6, "weights after step 2");
}

// Adam as Kingma & Ba write it, in double precision.
struct AdamReference {
  double lr, b1, b2, eps, wd;
  std::vector<double> w, m, v;
  int t = 0;
  void Step(const std::vector<float>& g) {
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double grad = g[i] + wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * grad;
      v[i] = b2 * v[i] + (1 - b2) * grad * grad;
      double m_hat = m[i] / (1 - std::pow(b1, t));
      double v_hat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

TEST(OptimizerTest, AdamTwoStepsWithBiasCorrection) {
  OptimizerConfig config;
  config.name = "adam";
  config.learning_rate = 0.01f;
  config.beta1 = 0.9f;
  config.beta2 = 0.999f;
  config.epsilon = 1e-8f;
  auto adam = Make(config);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;

  // Step 1 by hand: m = 0.1 g, v = 0.001 g^2, so m_hat = g and v_hat = g^2:
  // the step is lr * g / |g| = 0.01 * sign(g). Without bias correction it
  // would be lr * 0.1 g / sqrt(0.001 g^2), about 3.16x larger.
  adam->Apply(w.data(), kG1.data(), w.size(), &state);
  ExpectNear(w, {0.99, -2.01, 0.51}, 1e-6, "weights after step 1");
  // (1 - 0.999f) is 0.001 only to about 1e-5 relative, hence the tolerances.
  ExpectNear(state.slot1, {0.05, 0.1, -0.2}, 1e-7, "first moment after step 1");
  ExpectNear(state.slot2, {0.00025, 0.001, 0.004}, 1e-7, "second moment after step 1");
  EXPECT_EQ(state.steps, 1u);

  // Step 2, element 0 by hand: m = 0.9*0.05 + 0.1*0.25 = 0.07,
  // v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225,
  // m_hat = 0.07 / 0.19, v_hat = 0.00031225 / 0.001999,
  // w = 0.99 - 0.01 * 0.368421 / 0.395225 = 0.9806782.
  adam->Apply(w.data(), kG2.data(), w.size(), &state);
  EXPECT_NEAR(w[0], 0.9806782, 2e-6);
  EXPECT_EQ(state.steps, 2u);

  // The reference runs in double on the very float hyperparameters.
  AdamReference ref{0.01f, 0.9f, 0.999f, 1e-8f, 0.0, {1.0, -2.0, 0.5}, {0, 0, 0}, {0, 0, 0}};
  ref.Step(kG1);
  ref.Step(kG2);
  ExpectNear(w, ref.w, 1e-6, "weights after step 2");
  ExpectNear(state.slot1, ref.m, 1e-7, "first moment after step 2");
  ExpectNear(state.slot2, ref.v, 2e-9, "second moment after step 2");
}

TEST(OptimizerTest, AdamWeightDecayIsL2FoldedIntoGradient) {
  OptimizerConfig config;
  config.name = "adam";
  config.learning_rate = 0.05f;
  config.beta1 = 0.8f;
  config.beta2 = 0.99f;
  config.epsilon = 1e-6f;
  config.weight_decay = 0.1f;
  auto adam = Make(config);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;
  AdamReference ref{0.05f, 0.8f, 0.99f, 1e-6f, 0.1f, {1.0, -2.0, 0.5}, {0, 0, 0}, {0, 0, 0}};

  adam->Apply(w.data(), kG1.data(), w.size(), &state);
  ref.Step(kG1);
  ExpectNear(w, ref.w, 1e-6, "weights after step 1");
  adam->Apply(w.data(), kG2.data(), w.size(), &state);
  ref.Step(kG2);
  ExpectNear(w, ref.w, 1e-6, "weights after step 2");
  ExpectNear(state.slot1, ref.m, 1e-6, "first moment after step 2");

  // The decay really entered the moments: g1' = g1 + 0.1 w0 for element 1 is
  // 1 - 0.2 = 0.8, so m after step 1 was 0.2 * 0.8 = 0.16 (not 0.2).
  OptimizerState fresh;
  std::vector<float> w2 = kW0;
  adam->Apply(w2.data(), kG1.data(), w2.size(), &fresh);
  EXPECT_NEAR(fresh.slot1[1], 0.16, 1e-7);
}

TEST(OptimizerTest, StateIsPerPart) {
  // Two parts with their own state must not influence each other.
  OptimizerConfig config;
  config.name = "momentum";
  config.learning_rate = 1.0f;
  config.momentum = 0.5f;
  auto momentum = Make(config);
  ASSERT_NE(momentum, nullptr);
  std::vector<float> a = {0.0f}, b = {0.0f};
  const float g = 1.0f;
  OptimizerState sa, sb;
  momentum->Apply(a.data(), &g, 1, &sa);
  momentum->Apply(a.data(), &g, 1, &sa);  // v: 1, then 1.5 -> a = -2.5
  momentum->Apply(b.data(), &g, 1, &sb);  // v: 1 -> b = -1
  EXPECT_FLOAT_EQ(a[0], -2.5f);
  EXPECT_FLOAT_EQ(b[0], -1.0f);
}

// A parameter server updates out of place (ps-server/shard.h): the new
// weights go to another buffer and the old stay as they were. Both ways
// give the same bits, for every optimizer, over steps that carry state.
TEST(OptimizerTest, AnUpdateOutOfPlaceIsTheUpdateInPlaceBitForBit) {
  for (const char* name : {"sgd", "momentum", "adam", "none"}) {
    auto optimizer = MakeWithDecay(name);
    ASSERT_NE(optimizer, nullptr);
    // 1000 elements: the loops' vectorised bodies run, not only their tails.
    std::vector<float> in_place(1000), from(1000), grad(1000);
    for (size_t i = 0; i < in_place.size(); ++i) {
      in_place[i] = from[i] = std::sin(0.37f * static_cast<float>(i));
    }
    OptimizerState state_in_place, state_out_of_place;
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < grad.size(); ++i) {
        grad[i] = std::cos(0.11f * static_cast<float>(i * (step + 1)));
      }
      std::vector<float> to(from.size(), -1.0f);
      const std::vector<float> before = from;
      optimizer->Apply(in_place.data(), grad.data(), grad.size(), &state_in_place);
      optimizer->Apply(from.data(), to.data(), grad.data(), grad.size(), &state_out_of_place);
      EXPECT_EQ(from, before) << name << ": the weights read from were written";
      EXPECT_EQ(0, std::memcmp(to.data(), in_place.data(), to.size() * sizeof(float)))
          << name << " step " << step;
      from = to;
    }
    EXPECT_EQ(state_in_place.slot1, state_out_of_place.slot1) << name;
    EXPECT_EQ(state_in_place.slot2, state_out_of_place.slot2) << name;
  }
}

// The update loops are built for AVX2 and for the baseline processor, and
// the loader picks one: either must give each element the bits the formula
// gives it in plain float arithmetic, one element at a time, so that a job's
// results do not depend on which processor its servers run on.
TEST(OptimizerTest, EveryElementGetsTheBitsOfTheFormulaInFloat) {
  const float lr = 0.3f, wd = 0.01f, mu = 0.9f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  for (const char* name : {"sgd", "momentum", "adam"}) {
    OptimizerConfig config;
    config.name = name;
    config.learning_rate = lr;
    config.weight_decay = wd;
    config.momentum = mu;
    config.beta1 = beta1;
    config.beta2 = beta2;
    config.epsilon = epsilon;
    auto optimizer = Make(config);
    ASSERT_NE(optimizer, nullptr);
    // 1003 elements: the vector bodies of every width run, and a tail.
    const size_t n = 1003;
    std::vector<float> w(n), grad(n), expected(n), m(n, 0.0f), v(n, 0.0f);
    for (size_t i = 0; i < n; ++i) w[i] = expected[i] = std::sin(0.37f * static_cast<float>(i));
    OptimizerState state;
    for (int t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < n; ++i) grad[i] = std::cos(0.11f * static_cast<float>(i * t));
      optimizer->Apply(w.data(), grad.data(), n, &state);
      const float correction1 = 1.0f - std::pow(beta1, static_cast<float>(t));
      const float correction2 = 1.0f - std::pow(beta2, static_cast<float>(t));
      for (size_t i = 0; i < n; ++i) {
        volatile float from = expected[i];  // one element at a time, as a scalar
        float g = grad[i] + wd * from;
        if (std::string(name) == "sgd") {
          expected[i] = from - lr * g;
        } else if (std::string(name) == "momentum") {
          m[i] = mu * m[i] + g;
          expected[i] = from - lr * m[i];
        } else {
          m[i] = beta1 * m[i] + (1.0f - beta1) * g;
          v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
          float m_hat = m[i] / correction1;
          float v_hat = v[i] / correction2;
          expected[i] = from - lr * m_hat / (std::sqrt(v_hat) + epsilon);
        }
      }
      EXPECT_EQ(0, std::memcmp(w.data(), expected.data(), n * sizeof(float)))
          << name << " step " << t;
    }
  }
}

// A big part's update split over threads (a server with several cores):
// each range on a thread of its own, in no particular order, gives the bits
// of the whole update, and the step counts once.
TEST(OptimizerTest, AnUpdateSplitIntoRangesOnThreadsIsTheWholeUpdateBitForBit) {
  // Ranges of uneven lengths, the last one first, each on its own thread.
  const Optimizer::RangeRunner on_threads = [](size_t n,
                                               const std::function<void(size_t, size_t)>& range) {
    const std::vector<size_t> cuts = {0, 7, 300, 301, 640, n};
    std::vector<std::thread> threads;
    for (size_t k = cuts.size() - 1; k > 0; --k) {
      threads.emplace_back(range, cuts[k - 1], cuts[k]);
    }
    for (std::thread& t : threads) t.join();
  };
  for (const char* name : {"sgd", "momentum", "adam", "none"}) {
    auto optimizer = MakeWithDecay(name);
    ASSERT_NE(optimizer, nullptr);
    const size_t n = 1000;
    std::vector<float> whole(n), split(n), from(n), grad(n);
    for (size_t i = 0; i < n; ++i) from[i] = std::sin(0.37f * static_cast<float>(i));
    OptimizerState whole_state, split_state;
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < n; ++i) grad[i] = std::cos(0.11f * static_cast<float>(i * step));
      optimizer->Apply(from.data(), whole.data(), grad.data(), n, &whole_state);
      optimizer->ApplyInRanges(from.data(), split.data(), grad.data(), n, &split_state, on_threads);
      EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), n * sizeof(float)))
          << name << " step " << step;
      EXPECT_EQ(split_state.steps, static_cast<uint64_t>(step)) << name;
      from = whole;
    }
    EXPECT_EQ(whole_state.slot1, split_state.slot1) << name;
    EXPECT_EQ(whole_state.slot2, split_state.slot2) << name;
  }
}

// `none`: the servers only average; the part's value is the mean gradient,
// whatever it was before and whatever the learning rate or weight decay.
TEST(OptimizerTest, NoneStoresTheGradientAsTheValue) {
  OptimizerConfig config;
  config.name = "none";
  config.weight_decay = 0.5f;
  auto none = Make(config);
  ASSERT_NE(none, nullptr);
  std::vector<float> w = kW0;
  OptimizerState state;
  none->Apply(w.data(), kG1.data(), w.size(), &state);
  EXPECT_EQ(w, kG1);
  none->Apply(w.data(), kG2.data(), w.size(), &state);
  EXPECT_EQ(w, kG2);
  EXPECT_EQ(state.steps, 2u);
  EXPECT_TRUE(state.slot1.empty()) << "no optimizer state to checkpoint";
}

// A weight whose gradient stays zero (a dead ReLU unit's) sees Adam's first
// moment and momentum's velocity decay geometrically. Below FLT_MIN they
// must become 0, not denormal numbers, which cost a microcode assist per
// operation on many x86 processors (common/denormals.h). Weight decay 0 and
// a learning rate of 0 keep the weights, so only the state moves.
TEST(OptimizerTest, DecayingStateFlushesToZeroInsteadOfTurningDenormal) {
  for (const char* name : {"adam", "momentum"}) {
    SCOPED_TRACE(name);
    OptimizerConfig config;
    config.name = name;
    config.learning_rate = 0.0f;
    auto optimizer = Make(config);
    ASSERT_NE(optimizer, nullptr);
    std::vector<float> w = {1.0f, 1.0f};
    const std::vector<float> first = {1e-3f, -1e-3f};
    const std::vector<float> zero = {0.0f, 0.0f};
    OptimizerState state;
    optimizer->Apply(w.data(), first.data(), w.size(), &state);
    // 0.9^k * 1e-4 reaches FLT_MIN (1.2e-38) near k = 770 and the smallest
    // denormal (1.4e-45) near k = 920.
    int steps_to_zero = 0;
    for (int k = 1; k <= 1000 && state.slot1[0] != 0.0f; ++k) {
      optimizer->Apply(w.data(), zero.data(), w.size(), &state);
      for (float m : state.slot1) {
        ASSERT_NE(std::fpclassify(m), FP_SUBNORMAL) << "after " << k << " zero gradients: " << m;
      }
      steps_to_zero = k;
    }
    EXPECT_EQ(state.slot1, zero);
    EXPECT_LT(steps_to_zero, 800) << "flushed as it fell below FLT_MIN, not later";
  }
}

// The flush lasts only for the update: the calling thread gets its floating-
// point mode back, and denormals work there as before.
TEST(OptimizerTest, TheCallersFloatingPointModeIsRestored) {
  OptimizerConfig config;
  config.name = "adam";
  auto adam = Make(config);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = {1.0f};
  const std::vector<float> g = {0.5f};
  OptimizerState state;
  adam->Apply(w.data(), g.data(), w.size(), &state);
  volatile float smallest_normal = 1.17549435e-38f;  // FLT_MIN, kept from constant folding
  float half = smallest_normal * 0.5f;
  EXPECT_EQ(std::fpclassify(half), FP_SUBNORMAL);
  EXPECT_GT(half, 0.0f);
}

TEST(OptimizerTest, UnknownNameIsAnErrorNamingIt) {
  OptimizerConfig config;
  config.name = "rmsprop";
  std::string error;
  EXPECT_EQ(MakeOptimizer(config, &error), nullptr);
  EXPECT_EQ(error, "unknown optimizer \"rmsprop\" (want sgd, momentum, adam or none)");

  // Names are case sensitive, and a null error pointer is allowed.
  config.name = "SGD";
  EXPECT_EQ(MakeOptimizer(config, nullptr), nullptr);
  config.name = "";
  error.clear();
  EXPECT_EQ(MakeOptimizer(config, &error), nullptr);
  EXPECT_NE(error.find("unknown optimizer \"\""), std::string::npos) << error;
}

}  // namespace
}  // namespace kubeps
