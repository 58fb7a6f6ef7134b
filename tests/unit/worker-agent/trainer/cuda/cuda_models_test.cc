// Whole CUDA models against the CPU models: same parameters in, the same
// loss, every gradient, predictions and evaluation loss out, for softmax, mlp
// and cnn on one GPU, and the NCCL data-parallel step (MultiGpuModel) on two
// GPUs against the CPU model on the full batch. Needs CUDA devices; skipped
// otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/models.h"
#if KUBEPS_HAVE_CUDA
#include "worker-agent/trainer/cuda/cuda_model.h"
#endif

namespace kubeps::trainer {
namespace {

#define SKIP_WITHOUT_GPUS(n)                                                             \
  do {                                                                                   \
    if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: GPU test skipped";        \
    if (CudaDeviceCount() < (n)) {                                                       \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << CudaDeviceCount()        \
                   << " visible (cudaGetDeviceCount reports 0 or fails without a GPU): " \
                   << "GPU test skipped";                                                \
    }                                                                                    \
  } while (0)

struct Batch {
  std::vector<float> images;
  std::vector<uint8_t> labels;
};

Batch RandomBatch(uint64_t seed, int batch) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  Batch b;
  b.images.resize(static_cast<size_t>(batch) * kImageSize);
  for (float& x : b.images) x = pixel(rng);
  b.labels.resize(batch);
  for (uint8_t& l : b.labels) l = static_cast<uint8_t>(rng() % kNumClasses);
  return b;
}

// Gives the biases non-zero values (they start at 0) so their paths count.
void RandomizeBiases(std::vector<Parameter>& params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  for (Parameter& p : params) {
    if (p.shape.size() == 1) {
      for (float& v : p.value) v = dist(rng);
    }
  }
}

// One plain SGD step on the host values, as a PS round trip would do, so the
// next step checks that the CUDA model really reads the new `value`s.
void SgdStep(std::vector<Parameter>& params, float lr) {
  for (Parameter& p : params) {
    for (size_t i = 0; i < p.value.size(); ++i) p.value[i] -= lr * p.grad[i];
  }
}

void CopyValues(const std::vector<Parameter>& from, std::vector<Parameter>& to) {
  ASSERT_EQ(from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) to[i].value = from[i].value;
}

// Gradients agree when |gpu - cpu| <= rtol*|cpu| + atol_rel*max|cpu| for every
// element of every tensor (summation order is all that differs).
void ExpectSameGradients(const std::vector<Parameter>& gpu, const std::vector<Parameter>& cpu,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t t = 0; t < cpu.size(); ++t) {
    const auto& g = gpu[t].grad;
    const auto& c = cpu[t].grad;
    ASSERT_EQ(g.size(), c.size()) << what << " " << cpu[t].name;
    float scale = 0.0f;
    for (float v : c) scale = std::max(scale, std::fabs(v));
    const float atol = 1e-4f * scale + 1e-9f;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      if (std::fabs(g[i] - c[i]) > atol + 1e-3f * std::fabs(c[i]) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << cpu[t].name << " grad, " << bad << " of " << c.size()
                       << " differ; first at " << first << " gpu=" << g[first]
                       << " cpu=" << c[first] << " (scale " << scale << ")";
    EXPECT_GT(scale, 0.0f) << what << ": " << cpu[t].name << " has an all-zero gradient";
  }
}

void ExpectSameLoss(float gpu, float cpu, const std::string& what) {
  EXPECT_NEAR(gpu, cpu, 1e-4f * std::fabs(cpu) + 1e-6f) << what;
}

// Runs two training steps (with an SGD update of the host values between
// them) and an evaluation on `gpu` and on the CPU model of the same name,
// from the same initial parameters.
void CompareWithCpu(Model& gpu, const std::string& name, int batch, const std::string& what) {
  std::unique_ptr<Model> cpu = MakeModel(name);
  cpu->Initialize(42);
  gpu.Initialize(42);
  ASSERT_EQ(gpu.parameters().size(), cpu->parameters().size());
  for (size_t i = 0; i < cpu->parameters().size(); ++i) {
    EXPECT_EQ(gpu.parameters()[i].name, cpu->parameters()[i].name);
    EXPECT_EQ(gpu.parameters()[i].shape, cpu->parameters()[i].shape);
    EXPECT_EQ(gpu.parameters()[i].value, cpu->parameters()[i].value)
        << what << ": Initialize differs for " << cpu->parameters()[i].name;
  }
  RandomizeBiases(cpu->parameters(), 7);
  CopyValues(cpu->parameters(), gpu.parameters());

  for (int step = 0; step < 2; ++step) {
    const std::string at = what + " step " + std::to_string(step);
    const Batch b = RandomBatch(100 + step, batch);
    const float cpu_loss = cpu->ForwardBackward(b.images.data(), b.labels.data(), batch);
    const float gpu_loss = gpu.ForwardBackward(b.images.data(), b.labels.data(), batch);
    ExpectSameLoss(gpu_loss, cpu_loss, at + " loss");
    ExpectSameGradients(gpu.parameters(), cpu->parameters(), at);
    // The PS round trip: new values written on the host. The GPU model gets
    // the CPU's values, so both start the next step from the same point.
    SgdStep(cpu->parameters(), 0.1f);
    CopyValues(cpu->parameters(), gpu.parameters());
  }

  const Batch eval = RandomBatch(999, batch);
  std::vector<uint8_t> cpu_pred(batch), gpu_pred(batch), gpu_pred2(batch);
  const float cpu_eval =
      cpu->ForwardLoss(eval.images.data(), eval.labels.data(), batch, cpu_pred.data());
  const float gpu_eval =
      gpu.ForwardLoss(eval.images.data(), eval.labels.data(), batch, gpu_pred.data());
  ExpectSameLoss(gpu_eval, cpu_eval, what + " ForwardLoss");
  gpu.Predict(eval.images.data(), batch, gpu_pred2.data());
  EXPECT_EQ(gpu_pred, gpu_pred2) << what;
  // Random inputs can produce a near-tie between two logits; allow one.
  int differ = 0;
  for (int i = 0; i < batch; ++i) differ += cpu_pred[i] != gpu_pred[i];
  EXPECT_LE(differ, 1) << what << ": predictions differ on " << differ << " of " << batch;
  // ForwardLoss leaves the gradients alone.
  // (The last ForwardBackward's gradients are still the ones compared above.)
}

#if KUBEPS_HAVE_CUDA

TEST(CudaModelsTest, SoftmaxMatchesCpu) {
  SKIP_WITHOUT_GPUS(1);
  CudaModel gpu("softmax", 0);
  CompareWithCpu(gpu, "softmax", 32, "softmax");
}

TEST(CudaModelsTest, MlpMatchesCpu) {
  SKIP_WITHOUT_GPUS(1);
  CudaModel gpu("mlp", 0);
  CompareWithCpu(gpu, "mlp", 32, "mlp");
}

TEST(CudaModelsTest, CnnMatchesCpu) {
  SKIP_WITHOUT_GPUS(1);
  CudaModel gpu("cnn", 0);
  CompareWithCpu(gpu, "cnn", 12, "cnn");
}

TEST(CudaModelsTest, BatchSizeCanChangeBetweenCalls) {
  SKIP_WITHOUT_GPUS(1);
  CudaModel gpu("cnn", 0);
  CompareWithCpu(gpu, "cnn", 3, "cnn batch 3");
  CompareWithCpu(gpu, "cnn", 17, "cnn batch 17");
  CompareWithCpu(gpu, "cnn", 1, "cnn batch 1");
}

TEST(CudaModelsTest, EmptyBatchAndBadInput) {
  SKIP_WITHOUT_GPUS(1);
  CudaModel gpu("mlp", 0);
  gpu.Initialize(1);
  EXPECT_EQ(gpu.ForwardBackward(nullptr, nullptr, 0), 0.0f);
  for (const Parameter& p : gpu.parameters()) {
    EXPECT_EQ(p.grad, std::vector<float>(p.value.size(), 0.0f));
  }
  Batch b = RandomBatch(1, 4);
  b.labels[2] = 10;
  EXPECT_THROW(gpu.ForwardBackward(b.images.data(), b.labels.data(), 4), std::invalid_argument);
  b.labels[2] = 0;
  gpu.parameters()[0].value.resize(3);
  EXPECT_THROW(gpu.ForwardBackward(b.images.data(), b.labels.data(), 4), std::invalid_argument);
}

TEST(CudaModelsTest, MultiGpuWithOneDeviceMatchesCpu) {
  SKIP_WITHOUT_GPUS(1);
  MultiGpuModel gpu("mlp", 1);
  CompareWithCpu(gpu, "mlp", 16, "mlp on 1 GPU");
}

// The whole NCCL step: two replicas, each on half the batch, gradients
// allreduced, against the CPU model on the full batch.
TEST(CudaModelsTest, MultiGpuNcclStepMatchesCpuOnTheFullBatch) {
  SKIP_WITHOUT_GPUS(2);
  for (const std::string name : {"softmax", "mlp", "cnn"}) {
    MultiGpuModel gpu(name, 2);
    CompareWithCpu(gpu, name, 16, name + " on 2 GPUs");
    // An odd batch: slices of 4 and 3, still the gradient of the mean.
    CompareWithCpu(gpu, name, 7, name + " on 2 GPUs, batch 7");
    // Fewer examples than GPUs: one replica idles (zero gradients).
    CompareWithCpu(gpu, name, 1, name + " on 2 GPUs, batch 1");
  }
}

TEST(CudaModelsTest, MultiGpuOnAllDevicesMatchesCpu) {
  SKIP_WITHOUT_GPUS(3);
  MultiGpuModel gpu("cnn", CudaDeviceCount());
  CompareWithCpu(gpu, "cnn", 4 * CudaDeviceCount() + 1, "cnn on all GPUs");
}

#else  // !KUBEPS_HAVE_CUDA

TEST(CudaModelsTest, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA: GPU test skipped"; }

#endif

}  // namespace
}  // namespace kubeps::trainer
