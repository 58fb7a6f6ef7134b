// The cost of the shard's finiteness check on a push's gradient
// (ps-server/push_data.h): PushData::Read, which copies each gRPC slice in
// and checks it for NaN and Inf while it is in cache, against the plain
// copy of the same slices it did before. 1M floats (4 MB) in 16 KiB slices,
// as gRPC hands a large message over.
//
//   build/bin/push_data_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "ps-server/push_data.h"

namespace {

constexpr size_t kFloats = 1 << 20;
constexpr size_t kSlice = 16 << 10;

struct Gradient {
  std::string bytes;
  std::vector<std::string_view> pieces;
  Gradient() {
    std::vector<float> values(kFloats);
    for (size_t i = 0; i < kFloats; ++i) values[i] = 1e-3f * static_cast<float>(i % 977) - 0.4f;
    bytes.assign(reinterpret_cast<const char*>(values.data()), kFloats * sizeof(float));
    for (size_t at = 0; at < bytes.size(); at += kSlice) {
      pieces.emplace_back(bytes.data() + at, std::min(kSlice, bytes.size() - at));
    }
  }
};

const Gradient& TheGradient() {
  static const Gradient gradient;
  return gradient;
}

void BM_CopyOnly(benchmark::State& state) {
  const Gradient& g = TheGradient();
  std::vector<float> out(kFloats);
  for (auto _ : state) {
    char* to = reinterpret_cast<char*>(out.data());
    for (std::string_view piece : g.pieces) {
      std::memcpy(to, piece.data(), piece.size());
      to += piece.size();
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFloats * sizeof(float));
}
BENCHMARK(BM_CopyOnly);

void BM_CopyAndCheckFinite(benchmark::State& state) {
  const Gradient& g = TheGradient();
  std::vector<float> out(kFloats);
  for (auto _ : state) {
    kubeps::PushData data(g.pieces);
    bool finite = data.Read(out.data(), kFloats);
    benchmark::DoNotOptimize(finite);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFloats * sizeof(float));
}
BENCHMARK(BM_CopyAndCheckFinite);

}  // namespace
