// Values read where the servers keep them (KVOptions::map_values), end to
// end: the shards' buffers in /dev/shm, mapped by the workers. A server frees
// a buffer when it rolls back or shuts down, and may do so between its answer
// naming the buffer and the worker mapping it: the worker then pulls again,
// and no step is lost or applied twice.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/method_handler.h>
#include <gtest/gtest.h>

#include "common/resend.h"
#include "kubeps.grpc.pb.h"
#include "tests/unit/worker-agent/kv/kv_test_job.h"
#include "worker-agent/kv/kv_worker.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using namespace kv_testing;

// Stands in front of a shard and passes every call through, except the first
// answer of Pull and the first of PushPull that name a server's buffer: those
// name one that no longer exists, as when the server freed it since.
class FreedBufferProxy final : public grpc::Service {
 public:
  explicit FreedBufferProxy(const std::string& shard_address)
      : channel_(grpc::CreateChannel(shard_address, grpc::InsecureChannelCredentials())) {
    using Handler =
        grpc::internal::RpcMethodHandler<FreedBufferProxy, grpc::ByteBuffer, grpc::ByteBuffer,
                                         grpc::ByteBuffer, grpc::ByteBuffer>;
    for (size_t i = 0; i < kMethods.size(); ++i) {
      // gRPC keeps the path's pointer: paths_ lives as long as the service.
      paths_[i] = std::string("/") + v1::ParameterServer::service_full_name() + "/" + kMethods[i];
      AddMethod(new grpc::internal::RpcServiceMethod(
          paths_[i].c_str(), grpc::internal::RpcMethod::NORMAL_RPC,
          new Handler(
              [i](FreedBufferProxy* proxy, grpc::ServerContext* context,
                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
                return proxy->Forward(i, context, *request, response);
              },
              this)));
    }
  }

  // What went through, in order: "Pull", "PushPull", "Push", "Init", and
  // "freed" after the call whose answer was changed.
  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  static constexpr std::array<const char*, 4> kMethods = {"Init", "Push", "Pull", "PushPull"};
  static constexpr size_t kFirstPullMethod = 2;  // Pull and PushPull answer a pull

  grpc::Status Forward(size_t method, grpc::ServerContext* server, const grpc::ByteBuffer& request,
                       grpc::ByteBuffer* response) {
    grpc::ClientContext client;
    client.set_deadline(server->deadline());
    for (const auto& [key, value] : server->client_metadata()) {
      if (key == kTokenMetadataKey)
        client.AddMetadata(kTokenMetadataKey, std::string(value.data(), value.size()));
    }
    const grpc::internal::RpcMethod rpc(paths_[method].c_str(),
                                        grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Status s =
        grpc::internal::BlockingUnaryCall(channel_.get(), rpc, &client, request, response);
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(kMethods[method]);
    const bool answers_a_pull = method >= kFirstPullMethod;
    if (s.ok() && answers_a_pull && !freed_[method - kFirstPullMethod] &&
        NameFreedBuffers(response)) {
      freed_[method - kFirstPullMethod] = true;
      calls_.push_back("freed");
    }
    return s;
  }

  // Renames the buffers `response` names to ones that do not exist; false
  // if it names none.
  static bool NameFreedBuffers(grpc::ByteBuffer* response) {
    std::vector<grpc::Slice> slices;
    if (!response->Dump(&slices).ok()) return false;
    std::string bytes;
    for (const grpc::Slice& slice : slices) bytes.append(slice.begin(), slice.end());
    v1::PullResponse answer;
    if (!answer.ParseFromString(bytes) || answer.mapped_size() == 0) return false;
    for (v1::MappedValues& mapped : *answer.mutable_mapped()) {
      mapped.set_segment(mapped.segment() + "-freed");
    }
    grpc::Slice changed(answer.SerializeAsString());
    *response = grpc::ByteBuffer(&changed, 1);
    return true;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::array<std::string, kMethods.size()> paths_;
  std::mutex mutex_;
  std::vector<std::string> calls_;
  bool freed_[2] = {false, false};  // Pull's, PushPull's
};

// A tensor big enough to be mapped (kMinMappedBytes), and a small one, which
// is always landed. Every number exact in float: rank 0's initial values, and
// gradients whose mean over the two workers is 1.5 (step + 1).
const std::vector<uint64_t> kMappedSizes = {64 << 10, 5};
constexpr int kMappedSteps = 4;

float InitialValue(uint64_t i) { return 0.5f * static_cast<float>(i); }
float ExpectedValue(uint64_t i, int steps) {
  float w = InitialValue(i);
  for (int s = 0; s < steps; ++s) w -= 1.5f * static_cast<float>(s + 1);
  return w;
}

// Trains kMappedSteps sync steps, Push and Pull for the first half, PushPull
// for the rest, reading the values where the client says they are after
// each; "" or what failed.
std::string TrainMapped(const KVOptions& options) {
  std::unique_ptr<KVWorker> kv;
  if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
  const int rank = kv->rank();
  std::vector<std::vector<float>> init(kMappedSizes.size()), own_values(kMappedSizes.size()),
      own_grads(kMappedSizes.size());
  std::vector<const float*> init_ptrs;
  for (size_t k = 0; k < kMappedSizes.size(); ++k) {
    for (uint64_t i = 0; i < kMappedSizes[k]; ++i)
      init[k].push_back(rank == 0 ? InitialValue(i) : -7.0f);
    own_values[k].assign(kMappedSizes[k], 0.0f);
    own_grads[k].assign(kMappedSizes[k], 0.0f);
    init_ptrs.push_back(init[k].data());
  }
  if (Status s = kv->InitTensors(init_ptrs, kMappedSizes); !s.ok())
    return "InitTensors: " + s.message();
  // Where the values are now: in a view the client maps, or this worker's own.
  auto values = [&] {
    std::vector<float*> at;
    for (uint32_t k = 0; k < kMappedSizes.size(); ++k)
      at.push_back(kv->SharedValues(k) ? kv->SharedValues(k) : own_values[k].data());
    return at;
  };
  std::vector<float*> grad_out;  // where this worker computes its gradients
  for (uint32_t k = 0; k < kMappedSizes.size(); ++k)
    grad_out.push_back(kv->SharedGrads(k) ? kv->SharedGrads(k) : own_grads[k].data());
  const std::vector<const float*> grads(grad_out.begin(), grad_out.end());
  if (Status s = kv->Wait(kv->Pull(values(), 0)); !s.ok()) return "Pull 0: " + s.message();

  for (int step = 0; step < kMappedSteps; ++step) {
    for (uint32_t k = 0; k < kMappedSizes.size(); ++k) {
      std::fill_n(grad_out[k], kMappedSizes[k], static_cast<float>((rank + 1) * (step + 1)));
    }
    if (step < kMappedSteps / 2) {
      if (Status s = kv->Wait(kv->Push(grads, step)); !s.ok()) return "Push: " + s.message();
      if (Status s = kv->Wait(kv->Pull(values(), step + 1)); !s.ok()) return "Pull: " + s.message();
    } else if (Status s = kv->Wait(kv->PushPull(grads, values(), step)); !s.ok()) {
      return "PushPull: " + s.message();
    }
    const std::vector<float*> now = values();
    for (uint32_t k = 0; k < kMappedSizes.size(); ++k) {
      for (uint64_t i = 0; i < kMappedSizes[k]; ++i) {
        if (now[k][i] != ExpectedValue(i, step + 1)) {
          return "after step " + std::to_string(step) + ", key " + std::to_string(k) + " [" +
                 std::to_string(i) + "] is " + std::to_string(now[k][i]) + ", want " +
                 std::to_string(ExpectedValue(i, step + 1));
        }
      }
    }
  }
  return EndWorker(kv.get());
}

TEST(KVWorkerMappedValuesTest, AnAnswerNamingABufferFreedSinceIsPulledAgain) {
  std::vector<std::unique_ptr<FreedBufferProxy>> proxies;
  std::vector<std::unique_ptr<grpc::Server>> fronts;
  JobOptions job_options;
  job_options.map_values = true;
  job_options.front = [&](int, const std::string& listening) {
    proxies.push_back(std::make_unique<FreedBufferProxy>(listening));
    int port = 0;
    fronts.push_back(Serve(proxies.back().get(), &port));
    return "127.0.0.1:" + std::to_string(port);
  };
  Job job(job_options);
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = true;
    options.map_values = true;
    // Each tensor whole on a server of its own, in one part: the big one
    // starts on a page. (The small one follows no key: it fills the other
    // server, which the big one would otherwise be sliced over.)
    options.placement.big_array_bound = 1 << 20;
    options.placement.max_part_elems = 1 << 20;
    options.placement.follow_bound = 0;
    options.tcp_request_elems = 1 << 20;
    workers.push_back(std::async(std::launch::async, [options] { return TrainMapped(options); }));
  }
  ExpectWorkersSucceed(&workers, 30s);

  // The server of the big tensor answered with its buffers; each answer
  // changed (a Pull's, then a PushPull's) was followed by a Pull of the
  // worker it went to.
  int changed = 0;
  for (auto& proxy : proxies) {
    const std::vector<std::string> calls = proxy->Calls();
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i] != "freed") continue;
      ++changed;
      EXPECT_NE(std::find(calls.begin() + i, calls.end(), "Pull"), calls.end())
          << "no Pull after the answer naming a freed buffer (call " << i << ")";
    }
  }
  EXPECT_EQ(changed, 2) << "a Pull's and a PushPull's answer, on the big tensor's server";
}

}  // namespace
}  // namespace kubeps
