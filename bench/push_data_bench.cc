// The cost of the shard's finiteness check on a push's gradient
// (ps-server/push_data.h): PushData::Read, which copies each gRPC slice in
// and checks it for NaN and Inf while it is in cache, against the plain
// copy of the same slices it did before. 1M floats (4 MB) in 16 KiB slices,
// as gRPC hands a large message over. And the step's last push of two
// workers summed into the mean (Shard::GatherLast), its gradient in one
// piece as a push through shared memory hands it over: read through a copy
// into a block of the stack and summed in three passes, as the shard did,
// against read where it lies (PushData::View) and summed in one.
//
//   build/bin/push_data_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <algorithm>
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

// One 2 MiB part, as a worker's shared segment holds it, and the other
// worker's gradient already in its slot.
struct LastPush {
  std::vector<float> pushed, other, mean;
  std::vector<std::string_view> pieces;
  LastPush() : pushed(1 << 19), other(1 << 19), mean(1 << 19) {
    for (size_t i = 0; i < pushed.size(); ++i) {
      pushed[i] = 1e-3f * static_cast<float>(i % 977) - 0.4f;
      other[i] = 1e-3f * static_cast<float>(i % 751) - 0.3f;
    }
    pieces.emplace_back(reinterpret_cast<const char*>(pushed.data()),
                        pushed.size() * sizeof(float));
  }
};
constexpr size_t kBlock = 4096;

// The step's last push of the two summed into the mean a block at a time:
// `sum_block(data, other, mean, scratch)` sums one block and says whether
// the pushed floats were finite.
template <typename SumBlock>
void SumOfTwo(benchmark::State& state, SumBlock sum_block) {
  LastPush p;
  float scratch[kBlock];
  for (auto _ : state) {
    kubeps::PushData data(p.pieces);
    bool finite = true;
    for (size_t begin = 0; begin < p.mean.size(); begin += kBlock) {
      finite &= sum_block(data, p.other.data() + begin, p.mean.data() + begin, scratch);
    }
    benchmark::DoNotOptimize(finite);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * p.pushed.size() * sizeof(float));
}

// As the shard did: the pushed block copied out and checked, the other
// worker's copied into the mean, then added, then scaled.
void BM_SumOfTwoThroughACopy(benchmark::State& state) {
  SumOfTwo(state,
           [](kubeps::PushData& data, const float* other, float* __restrict m, float* incoming) {
             const bool finite = data.Read(incoming, kBlock);
             std::copy_n(other, kBlock, m);
             for (size_t i = 0; i < kBlock; ++i) m[i] += incoming[i];
             for (size_t i = 0; i < kBlock; ++i) m[i] *= 0.5f;
             return finite;
           });
}
BENCHMARK(BM_SumOfTwoThroughACopy);

// As it does now: the pushed block checked where it lies, and one pass.
void BM_SumOfTwoInPlace(benchmark::State& state) {
  SumOfTwo(state, [](kubeps::PushData& data, const float* __restrict other, float* __restrict m,
                     float* scratch) {
    bool finite = true;
    const float* __restrict in = data.View(kBlock, scratch, &finite);
    for (size_t i = 0; i < kBlock; ++i) m[i] = (other[i] + in[i]) * 0.5f;
    return finite;
  });
}
BENCHMARK(BM_SumOfTwoInPlace);

}  // namespace
