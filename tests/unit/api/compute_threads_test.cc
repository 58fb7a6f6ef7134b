#include "api/compute_threads.h"

#include <gtest/gtest.h>

#include <string>

namespace kubeps {
namespace {

api::NodeConfig Given(int blas_threads, int cpu_request) {
  api::NodeConfig config;
  config.blas_threads = blas_threads;
  config.cpu_request = cpu_request;
  return config;
}

TEST(ComputeThreadsTest, OnKubernetesAWorkerComputesOnTheCoresItsContainerRequested) {
  const ComputeThreads two = ThreadsToComputeOn(Given(0, 2), 8);
  EXPECT_EQ(two.threads, 2);
  EXPECT_EQ(std::string(two.why), "the container's CPU request");
  EXPECT_EQ(ThreadsToComputeOn(Given(0, 6), 4).threads, 4) << "never more than it may use";
}

TEST(ComputeThreadsTest, AContainerThatRequestedNoCpuComputesOnOneThreadNotOnEveryCore) {
  const ComputeThreads none = ThreadsToComputeOn(Given(0, 0), 8);
  EXPECT_EQ(none.threads, 1);
  EXPECT_EQ(std::string(none.why), "the container requested no CPU");
}

TEST(ComputeThreadsTest, KubepsBlasThreadsWinsAndALocalRunUsesTheCoresItMayUse) {
  EXPECT_EQ(ThreadsToComputeOn(Given(3, 0), 8).threads, 3);
  EXPECT_EQ(ThreadsToComputeOn(Given(3, 2), 8).threads, 3);
  const ComputeThreads local = ThreadsToComputeOn(Given(0, -1), 8);
  EXPECT_EQ(local.threads, 8);
  EXPECT_EQ(std::string(local.why), "the cores this process may use");
}

TEST(ComputeThreadsTest, TheLogLineSaysHowManyAndWhy) {
  EXPECT_EQ(Describe({2, "the container's CPU request"}),
            "2 threads (the container's CPU request)");
  EXPECT_EQ(Describe({1, "KUBEPS_BLAS_THREADS"}), "1 thread (KUBEPS_BLAS_THREADS)");
}

}  // namespace
}  // namespace kubeps
