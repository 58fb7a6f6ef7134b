// End to end on the real Fashion-MNIST: the MLP learns with plain SGD, the
// data-parallel split gives the same averaged gradient as one big batch, and
// Evaluate reports accuracy and loss.
#include <cblas.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "worker-agent/trainer/batch_sampler.h"
#include "worker-agent/trainer/evaluate.h"
#include "worker-agent/trainer/fashion_mnist.h"
#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {
namespace {

const bool kSingleBlasThread = [] {
  openblas_set_num_threads(1);
  return true;
}();

class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = kFashionMnistDefaultDir;
    if (access((dir + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0) return;
    data_ = new FashionMnist;
    const Status s = LoadFashionMnist(dir, data_);
    if (!s.ok()) {
      ADD_FAILURE() << s.message();
      delete data_;
      data_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  void SetUp() override {
    if (data_ == nullptr) GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDefaultDir;
  }
  static FashionMnist* data_;
};

FashionMnist* TrainingTest::data_ = nullptr;

TEST_F(TrainingTest, MlpLearnsWithSgdInOneEpoch) {
  const int batch = 64;
  const float lr = 0.1f;
  auto model = MakeModel("mlp");
  model->Initialize(1);
  double loss0 = 0;
  const double acc0 = Evaluate(*model, data_->test, 1000, &loss0);
  EXPECT_LT(acc0, 0.3);

  const auto start = std::chrono::steady_clock::now();
  BatchSampler sampler(data_->train.size(), batch, /*seed=*/1);
  std::vector<float> images(static_cast<size_t>(batch) * 784);
  std::vector<uint8_t> labels(batch);
  double first_losses = 0, last_losses = 0;
  const int64_t steps = sampler.StepsPerEpoch();
  for (int64_t step = 0; step < steps; ++step) {
    ASSERT_TRUE(
        FillWorkerBatch(data_->train, sampler, 0, step, 0, 1, images.data(), labels.data()).ok());
    const float loss = model->ForwardBackward(images.data(), labels.data(), batch);
    ASSERT_TRUE(std::isfinite(loss));
    if (step < 50) first_losses += loss;
    if (step >= steps - 50) last_losses += loss;
    for (Parameter& p : model->parameters()) {
      for (size_t i = 0; i < p.value.size(); ++i) p.value[i] -= lr * p.grad[i];
    }
  }
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double loss = 0;
  const double acc = Evaluate(*model, data_->test, 1000, &loss);
  std::printf(
      "mlp, SGD lr %.2f, batch %d, 1 epoch (%lld steps, %.2f s): test accuracy %.4f, "
      "test loss %.4f (before: %.4f, %.4f)\n",
      lr, batch, static_cast<long long>(steps), train_s, acc, loss, acc0, loss0);
  RecordProperty("test_accuracy", std::to_string(acc));
  EXPECT_GT(acc, 0.80);
  EXPECT_LT(loss, 0.6);
  EXPECT_LT(last_losses, 0.5 * first_losses);
}

TEST_F(TrainingTest, TwoWorkersAverageToTheGradientOfOneWorker) {
  // Worker r of 2 computes the mean-loss gradient of its 32 examples; the
  // mean of the two equals the gradient of the 64-example batch up to float
  // rounding.
  for (const char* name : {"mlp", "cnn"}) {
    BatchSampler sampler(data_->train.size(), 64, 5);
    auto big = MakeModel(name), w0 = MakeModel(name), w1 = MakeModel(name);
    big->Initialize(3);
    w0->Initialize(3);
    w1->Initialize(3);
    std::vector<float> images(64 * 784);
    std::vector<uint8_t> labels(64);
    ASSERT_TRUE(
        FillWorkerBatch(data_->train, sampler, 2, 7, 0, 1, images.data(), labels.data()).ok());
    const float loss = big->ForwardBackward(images.data(), labels.data(), 64);
    ASSERT_TRUE(
        FillWorkerBatch(data_->train, sampler, 2, 7, 0, 2, images.data(), labels.data()).ok());
    const float l0 = w0->ForwardBackward(images.data(), labels.data(), 32);
    ASSERT_TRUE(
        FillWorkerBatch(data_->train, sampler, 2, 7, 1, 2, images.data(), labels.data()).ok());
    const float l1 = w1->ForwardBackward(images.data(), labels.data(), 32);
    EXPECT_NEAR((l0 + l1) / 2, loss, 1e-5 * loss) << name;
    for (size_t t = 0; t < big->parameters().size(); ++t) {
      const auto& g = big->parameters()[t].grad;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const double avg =
            0.5 * (static_cast<double>(w0->parameters()[t].grad[i]) + w1->parameters()[t].grad[i]);
        diff += (avg - g[i]) * (avg - g[i]);
        norm += static_cast<double>(g[i]) * g[i];
      }
      EXPECT_LT(std::sqrt(diff), 1e-4 * std::sqrt(norm))
          << name << " " << big->parameters()[t].name;
    }
  }
}

TEST_F(TrainingTest, EvaluateCountsEveryExampleOnce) {
  auto model = MakeModel("softmax");
  model->Initialize(4);
  double loss_a = 0, loss_b = 0;
  // 10000 is not a multiple of 384: the last batch is partial.
  const double a = Evaluate(*model, data_->test, 384, &loss_a);
  const double b = Evaluate(*model, data_->test, 10000, &loss_b);
  EXPECT_EQ(a, b);
  EXPECT_NEAR(loss_a, loss_b, 1e-5);
  EXPECT_GE(a, 0.0);
  EXPECT_LE(a, 1.0);
  // Cross-check against Predict.
  std::vector<float> images(10000 * 784);
  std::vector<uint8_t> labels(10000), pred(10000);
  data_->test.Slice(0, 10000, images.data(), labels.data());
  model->Predict(images.data(), 10000, pred.data());
  int correct = 0;
  for (int i = 0; i < 10000; ++i) correct += pred[i] == labels[i];
  EXPECT_DOUBLE_EQ(a, correct / 10000.0);
  Dataset empty;
  EXPECT_EQ(Evaluate(*model, empty, 10), 0.0);
}

}  // namespace
}  // namespace kubeps::trainer
