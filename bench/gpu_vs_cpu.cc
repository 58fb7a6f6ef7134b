// A worker's training step on the CUDA backend against the CPU backend, the
// built-in models side by side in one run: steps/s of ForwardBackward at one
// batch size on each backend, interleaved over several rounds, medians and the
// GPU/CPU ratio. A GPU step here is the whole step a worker takes: the
// parameters go to the device before it (they were just pulled) and the
// gradients come back after it (they are about to be pushed), as
// gpu_backend.h's contract says.
//
//   gpu_vs_cpu [--models=mlp,cnn] [--batch=128] [--rounds=5] [--seconds=1]
//              [--threads=N]   (OpenBLAS and oneDNN threads of the CPU side:
//                               one OpenMP pool, set by openblas_set_num_threads)
//
// Without a CUDA device (or in a build without CUDA) it prints the CPU side
// and says why the GPU side is missing.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/model.h"

namespace {

using kubeps::trainer::Model;

struct Options {
  std::vector<std::string> models = {"mlp", "cnn"};
  int batch = 128;
  int rounds = 5;
  double seconds = 1.0;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
};

// nullopt with *exit_code set: --help, or a bad flag (named, exit 2).
std::optional<Options> ParseOptions(int argc, char** argv, int* exit_code) {
  Options options;
  CLI::App app{"a worker's step on the CUDA backend against the CPU backend, side by side"};
  app.add_option("--models", options.models, "built-in models, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--batch", options.batch, "examples per step")->check(CLI::PositiveNumber);
  app.add_option("--rounds", options.rounds, "interleaved rounds per side")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", options.seconds, "length of one round")->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "OpenBLAS and oneDNN threads of the CPU side")
      ->check(CLI::PositiveNumber);
  if (std::optional<int> code = kubeps::ParseCommandLine(app, argc, argv)) {
    *exit_code = *code;
    return std::nullopt;
  }
  return options;
}

struct Batch {
  std::vector<float> images;
  std::vector<uint8_t> labels;
};

Batch RandomBatch(int batch) {
  std::mt19937_64 rng(7);
  Batch b;
  b.images.resize(static_cast<size_t>(batch) * 784);
  b.labels.resize(batch);
  for (float& x : b.images) x = static_cast<float>(rng() >> 40) / 16777216.0f;
  for (uint8_t& y : b.labels) y = static_cast<uint8_t>(rng() % 10);
  return b;
}

// Steps per second of `model` over at least `seconds` of wall-clock time.
// ForwardBackward returns the loss, read on the host, so a GPU step has
// finished (its gradients copied back) when it returns.
double StepsPerSecond(Model& model, const Batch& batch, int size, double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int steps = 0;
  double elapsed = 0;
  do {
    float loss = model.ForwardBackward(batch.images.data(), batch.labels.data(), size);
    if (!(loss == loss)) {
      std::fprintf(stderr, "gpu_vs_cpu: the loss is NaN\n");
      std::exit(1);
    }
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return steps / elapsed;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::unique_ptr<Model> Make(const std::string& name, const std::string& backend) {
  std::string error;
  std::unique_ptr<Model> model = kubeps::trainer::MakeModelForBackend(name, backend, 1, &error);
  if (model == nullptr) {
    std::fprintf(stderr, "gpu_vs_cpu: %s model on %s: %s\n", name.c_str(), backend.c_str(),
                 error.c_str());
    std::exit(1);
  }
  model->Initialize(1);
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<Options> parsed = ParseOptions(argc, argv, &exit_code);
  if (!parsed) return exit_code;
  const Options& options = *parsed;
  openblas_set_num_threads(options.threads);

  std::string no_gpu;
  if (!kubeps::trainer::BuiltWithCuda()) {
    no_gpu = "built without CUDA";
  } else if (kubeps::trainer::CudaDeviceCount() == 0) {
    no_gpu = "no CUDA device visible";
  }
  std::printf("batch %d, %d rounds of %.1f s per side, CPU side on %d threads%s%s\n", options.batch,
              options.rounds, options.seconds, options.threads,
              no_gpu.empty() ? "" : "; GPU side skipped: ", no_gpu.c_str());
  std::printf("%-6s %14s %14s %10s\n", "model", "cpu steps/s", "gpu steps/s", "gpu/cpu");

  const Batch batch = RandomBatch(options.batch);
  for (const std::string& name : options.models) {
    std::unique_ptr<Model> cpu = Make(name, "cpu");
    std::unique_ptr<Model> gpu = no_gpu.empty() ? Make(name, "cuda") : nullptr;
    // Warm-up: buffers, cuBLAS handles and oneDNN primitives are made on the
    // first steps.
    StepsPerSecond(*cpu, batch, options.batch, 0.2);
    if (gpu) StepsPerSecond(*gpu, batch, options.batch, 0.2);
    std::vector<double> cpu_rates, gpu_rates;
    for (int round = 0; round < options.rounds; ++round) {
      cpu_rates.push_back(StepsPerSecond(*cpu, batch, options.batch, options.seconds));
      if (gpu) gpu_rates.push_back(StepsPerSecond(*gpu, batch, options.batch, options.seconds));
    }
    double cpu_rate = Median(cpu_rates);
    if (gpu) {
      double gpu_rate = Median(gpu_rates);
      std::printf("%-6s %14.1f %14.1f %9.1fx\n", name.c_str(), cpu_rate, gpu_rate,
                  gpu_rate / cpu_rate);
    } else {
      std::printf("%-6s %14.1f %14s %10s\n", name.c_str(), cpu_rate, "-", "-");
    }
    std::fflush(stdout);
  }
  return 0;
}
