// ForwardBackward throughput of the built-in models. items_per_second is
// training steps per second (one ForwardBackward of a batch per item). The
// arguments are the OpenBLAS thread count and the batch: 2 threads at 128 is
// `kubeps train-local` of the benchmarks' jobs on 2 cores, 1 thread at 64 one
// worker of their 2 x 2 job (bench/scaling.py). Wall-clock time is reported,
// since the BLAS threads do the work.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "worker-agent/trainer/model.h"

namespace {

using kubeps::trainer::MakeModel;

void BM_ForwardBackward(benchmark::State& state, const std::string& name) {
  openblas_set_num_threads(static_cast<int>(state.range(0)));
  const int batch = static_cast<int>(state.range(1));
  auto model = MakeModel(name);
  model->Initialize(1);
  std::mt19937_64 rng(7);
  std::vector<float> images(static_cast<size_t>(batch) * 784);
  std::vector<uint8_t> labels(batch);
  for (float& x : images) x = static_cast<float>(rng() >> 40) / 16777216.0f;
  for (uint8_t& y : labels) y = static_cast<uint8_t>(rng() % 10);
  model->ForwardBackward(images.data(), labels.data(), batch);  // warm the buffers
  for (auto _ : state) {
    float loss = model->ForwardBackward(images.data(), labels.data(), batch);
    benchmark::DoNotOptimize(loss);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["batch"] = batch;
}

BENCHMARK_CAPTURE(BM_ForwardBackward, softmax, std::string("softmax"))
    ->ArgNames({"threads", "batch"})
    ->Args({1, 128})
    ->Args({2, 128})
    ->Args({1, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ForwardBackward, mlp, std::string("mlp"))
    ->ArgNames({"threads", "batch"})
    ->Args({1, 128})
    ->Args({2, 128})
    ->Args({1, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ForwardBackward, cnn, std::string("cnn"))
    ->ArgNames({"threads", "batch"})
    ->Args({1, 128})
    ->Args({2, 128})
    ->Args({1, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
