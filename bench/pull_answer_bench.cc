// The worker's one copy of every byte it pulls over TCP: a pull answer's
// data read out of gRPC's slices into the tensors (worker-agent/kv/
// tensor_wire.h). protobuf's ReadRaw, which copies with glibc's memcpy,
// against ReadBytes, which copies with CopyBytes (common/copy_bytes.h).
// A 4 MiB answer (a request's two 2 MiB parts) in the 64 KiB slices gRPC
// 1.51 hands over, the first cut short where the message's header ends;
// eight answers in turn, 32 MiB, so that each is read from memory, not
// cache, as in a job.
//
//   build/bin/pull_answer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "worker-agent/kv/tensor_wire.h"

namespace {

constexpr size_t kAnswerBytes = 4 << 20;
constexpr size_t kSlice = 64 << 10;
constexpr size_t kHeaderCut = 4562;  // the first slice ends here, off a float's boundary
constexpr int kAnswers = 8;

struct Answers {
  std::vector<std::string> bytes;
  std::vector<grpc::ByteBuffer> buffers;
  Answers() {
    for (int a = 0; a < kAnswers; ++a) {
      bytes.emplace_back(kAnswerBytes, static_cast<char>(a + 1));
      std::vector<grpc::Slice> slices;
      for (size_t at = 0; at < kAnswerBytes;) {
        const size_t size = std::min(at == 0 ? kSlice - kHeaderCut : kSlice, kAnswerBytes - at);
        slices.emplace_back(bytes.back().data() + at, size);
        at += size;
      }
      buffers.emplace_back(slices.data(), slices.size());
    }
  }
};

template <typename Read>
void ReadAnswers(benchmark::State& state, Read read) {
  static Answers answers;
  std::vector<std::vector<float>> tensors(kAnswers, std::vector<float>(kAnswerBytes / 4));
  for (auto _ : state) {
    for (int a = 0; a < kAnswers; ++a) {
      grpc::ByteBuffer answer(answers.buffers[a]);  // shares the slices
      grpc::ProtoBufferReader reader(&answer);
      google::protobuf::io::CodedInputStream in(&reader);
      if (!read(in, tensors[a].data())) state.SkipWithError("the answer ended early");
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kAnswers * kAnswerBytes);
}

void BM_ReadRaw(benchmark::State& state) {
  ReadAnswers(state, [](google::protobuf::io::CodedInputStream& in, float* to) {
    return in.ReadRaw(to, static_cast<int>(kAnswerBytes));
  });
}
BENCHMARK(BM_ReadRaw);

void BM_ReadBytes(benchmark::State& state) {
  ReadAnswers(state, [](google::protobuf::io::CodedInputStream& in, float* to) {
    return kubeps::ReadBytes(in, to, kAnswerBytes);
  });
}
BENCHMARK(BM_ReadBytes);

}  // namespace
