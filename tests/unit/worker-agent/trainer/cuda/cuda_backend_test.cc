// The backend selection of gpu_backend.h. These tests need no GPU: they
// check the CPU fallback and the error messages on machines without CUDA
// devices (CI), and what they can of the CUDA path where devices exist.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/cuda/gpu_backend_internal.h"
#include "worker-agent/trainer/models.h"
#if KUBEPS_HAVE_CUDA
#include "worker-agent/trainer/cuda/cuda_model.h"
#endif

namespace kubeps::trainer {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CudaBackendTest, BuiltWithCudaMatchesTheBuild) {
  EXPECT_EQ(BuiltWithCuda(), KUBEPS_HAVE_CUDA == 1);
  EXPECT_GE(CudaDeviceCount(), 0);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(CudaDeviceCount(), 0);
  }
}

TEST(CudaBackendTest, CpuBackendReturnsTheCpuModel) {
  std::string error;
  std::unique_ptr<Model> m = MakeModelForBackend("mlp", "cpu", 0, &error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_NE(dynamic_cast<MlpModel*>(m.get()), nullptr);
  EXPECT_EQ(m->parameters().size(), 4u);
  // gpus does not matter on the CPU.
  m = MakeModelForBackend("cnn", "cpu", 8, &error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_NE(dynamic_cast<CnnModel*>(m.get()), nullptr);
  m = MakeModelForBackend("softmax", "cpu", 1, nullptr);
  ASSERT_NE(m, nullptr);
  EXPECT_NE(dynamic_cast<SoftmaxModel*>(m.get()), nullptr);
}

TEST(CudaBackendTest, AutoWithoutDevicesReturnsTheCpuModel) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible: auto resolves to cuda";
  for (int gpus : {0, 1, 4}) {
    std::string error;
    std::unique_ptr<Model> m = MakeModelForBackend("mlp", "auto", gpus, &error);
    ASSERT_NE(m, nullptr) << error;
    EXPECT_NE(dynamic_cast<MlpModel*>(m.get()), nullptr) << "gpus=" << gpus;
  }
}

TEST(CudaBackendTest, CudaWithoutDevicesIsAnErrorNamingBackendAndDeviceCount) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible";
  std::string error;
  std::unique_ptr<Model> m = MakeModelForBackend("mlp", "cuda", 1, &error);
  EXPECT_EQ(m, nullptr);
  EXPECT_TRUE(Contains(error, "'cuda'")) << error;
  EXPECT_TRUE(Contains(error, "0 CUDA device")) << error;
  if (!BuiltWithCuda()) {
    EXPECT_TRUE(Contains(error, "built without CUDA")) << error;
  }
  // A null error pointer is allowed.
  EXPECT_EQ(MakeModelForBackend("mlp", "cuda", 1, nullptr), nullptr);
}

TEST(CudaBackendTest, MoreGpusThanDevicesIsAnError) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: covered by the test above";
  const int devices = CudaDeviceCount();
  std::string error;
  EXPECT_EQ(MakeModelForBackend("cnn", "cuda", devices + 1, &error), nullptr);
  EXPECT_TRUE(Contains(error, "gpus=" + std::to_string(devices + 1))) << error;
  EXPECT_TRUE(Contains(error, std::to_string(devices) + " CUDA device(s)")) << error;
}

TEST(CudaBackendTest, UnknownBackendIsAnError) {
  std::string error;
  EXPECT_EQ(MakeModelForBackend("mlp", "tpu", 1, &error), nullptr);
  EXPECT_TRUE(Contains(error, "unknown backend 'tpu'")) << error;
  EXPECT_TRUE(Contains(error, "cpu, cuda or auto")) << error;
  EXPECT_EQ(MakeModelForBackend("mlp", "", 1, &error), nullptr);
  EXPECT_TRUE(Contains(error, "unknown backend")) << error;
  EXPECT_EQ(MakeModelForBackend("mlp", "CUDA", 1, &error), nullptr);  // case matters
}

TEST(CudaBackendTest, UnknownModelIsAnError) {
  for (const char* backend : {"cpu", "cuda", "auto"}) {
    std::string error;
    EXPECT_EQ(MakeModelForBackend("resnet", backend, 1, &error), nullptr);
    EXPECT_TRUE(Contains(error, "unknown model 'resnet'")) << error;
    EXPECT_TRUE(Contains(error, "softmax, mlp or cnn")) << error;
  }
}

TEST(CudaBackendTest, NegativeGpusIsAnError) {
  std::string error;
  EXPECT_EQ(MakeModelForBackend("mlp", "cuda", -1, &error), nullptr);
  EXPECT_TRUE(Contains(error, "gpus must be >= 1")) << error;
}

// Without a device, building a CUDA model fails in its first CUDA call, and
// the error names that call, where it is and the CUDA error.
TEST(CudaBackendTest, CudaErrorsNameTheFailedCall) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible: no error to provoke";
  std::string error;
  EXPECT_EQ(internal::MakeCudaModelOnDevices("mlp", 1, &error), nullptr);
  EXPECT_TRUE(Contains(error, "backend 'cuda'")) << error;
  EXPECT_TRUE(Contains(error, "failed at ")) << error;
  EXPECT_TRUE(Contains(error, "cuda")) << error;
  EXPECT_TRUE(Contains(error, "cudaError")) << error;  // cudaGetErrorName, e.g. cudaErrorNoDevice
#if KUBEPS_HAVE_CUDA
  try {
    CudaModel model("softmax", 0);
    ADD_FAILURE() << "CudaModel built without a device";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(Contains(e.what(), "failed at ")) << e.what();
  }
#endif
}

TEST(CudaBackendTest, CudaOrAutoWithDevicesReturnsAGpuModel) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports 0 or fails)";
  }
#if KUBEPS_HAVE_CUDA
  for (const char* backend : {"cuda", "auto"}) {
    std::string error;
    std::unique_ptr<Model> m = MakeModelForBackend("mlp", backend, 1, &error);
    ASSERT_NE(m, nullptr) << error;
    EXPECT_NE(dynamic_cast<CudaModel*>(m.get()), nullptr) << backend;
    EXPECT_EQ(m->parameters().size(), 4u);
  }
  if (CudaDeviceCount() >= 2) {
    std::string error;
    std::unique_ptr<Model> m = MakeModelForBackend("cnn", "cuda", 2, &error);
    ASSERT_NE(m, nullptr) << error;
    auto* multi = dynamic_cast<MultiGpuModel*>(m.get());
    ASSERT_NE(multi, nullptr);
    EXPECT_EQ(multi->gpus(), 2);
  }
#endif
}

}  // namespace
}  // namespace kubeps::trainer
