// ForwardBackward throughput of the built-in models at batch 128.
// items_per_second is training steps per second (one ForwardBackward of a
// 128-example batch per item). The second argument is the OpenBLAS thread
// count. Wall-clock time is reported, since the BLAS threads do the work.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "worker-agent/trainer/model.h"

namespace {

using kubeps::trainer::MakeModel;

constexpr int kBatch = 128;

void BM_ForwardBackward(benchmark::State& state, const std::string& name) {
  openblas_set_num_threads(static_cast<int>(state.range(0)));
  auto model = MakeModel(name);
  model->Initialize(1);
  std::mt19937_64 rng(7);
  std::vector<float> images(static_cast<size_t>(kBatch) * 784);
  std::vector<uint8_t> labels(kBatch);
  for (float& x : images) x = static_cast<float>(rng() >> 40) / 16777216.0f;
  for (uint8_t& y : labels) y = static_cast<uint8_t>(rng() % 10);
  model->ForwardBackward(images.data(), labels.data(), kBatch);  // warm the buffers
  for (auto _ : state) {
    float loss = model->ForwardBackward(images.data(), labels.data(), kBatch);
    benchmark::DoNotOptimize(loss);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["batch"] = kBatch;
}

BENCHMARK_CAPTURE(BM_ForwardBackward, softmax, std::string("softmax"))
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ForwardBackward, mlp, std::string("mlp"))
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ForwardBackward, cnn, std::string("cnn"))
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
