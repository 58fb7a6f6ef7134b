// The parameter server's RPC handlers (ps-server/ps_service.h: Init, Push,
// Pull, PushPull) on any request bytes, through gRPC in this process, against a sync
// shard of 2 workers. The first byte picks the method. The shard keeps what
// earlier inputs left (initialised keys, pushed steps), as a live shard
// would; it is made afresh every 500 inputs so that memory stays that of
// one shard's bounded state.
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/optimizer.h"
#include "kubeps.pb.h"
#include "ps-server/ps_service.h"
#include "ps-server/shard.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/rpc_fuzzing.h"

namespace {

using kubeps::fuzz::InProcessServer;

const char* const kMethods[] = {
    "/kubeps.v1.ParameterServer/Init", "/kubeps.v1.ParameterServer/Push",
    "/kubeps.v1.ParameterServer/Pull", "/kubeps.v1.ParameterServer/PushPull"};

// A PushPull's pull waits at most 5 ms, as a Pull's does (WithShortWait).
std::string WithShortPullWait(const std::string& body) {
  kubeps::v1::PushRequest request;
  if (!request.ParseFromString(body) || request.then_pull().wait_ms() <= 5) return body;
  request.mutable_then_pull()->set_wait_ms(5);
  return request.SerializeAsString();
}

struct ShardUnderTest {
  ShardUnderTest() {
    kubeps::ShardOptions options;
    options.sync = true;
    options.num_workers = 2;
    options.optimizer.name = "adam";
    std::string error;
    shard = std::make_unique<kubeps::Shard>(
        options, kubeps::MakeOptimizer(options.optimizer, &error), &kubeps::NullMetrics());
    service = std::make_unique<kubeps::ParameterServerService>(
        shard.get(), kubeps::JobToken::Fixed(kubeps::fuzz::kToken), nullptr);
    server = std::make_unique<InProcessServer>(service.get());
  }
  std::unique_ptr<kubeps::Shard> shard;
  std::unique_ptr<kubeps::ParameterServerService> service;
  std::unique_ptr<InProcessServer> server;
};

kubeps::v1::RequestId Id(const char* node, uint64_t seq) {
  kubeps::v1::RequestId id;
  id.set_node_id(node);
  id.set_incarnation(7);
  id.set_seq(seq);
  return id;
}

std::string Floats(size_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), n * sizeof(float));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ShardUnderTest& target = kubeps::fuzz::FreshEvery<ShardUnderTest>();
  kubeps::fuzz::RpcInput in = kubeps::fuzz::SplitInput(data, size, 4);
  if (in.method == 2) in.body = kubeps::fuzz::WithShortWait<kubeps::v1::PullRequest>(in.body);
  if (in.method == 3) in.body = WithShortPullWait(in.body);
  target.server->Call(kMethods[in.method], in.body, 1000);
  return 0;
}

// A whole step: key 0 (8 floats) and key 1 (4 floats) initialised, both
// workers' pushes in each encoding, a pull of the next version; and a step
// of PushPull calls, each with the pull of the version after it.
std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  kubeps::v1::InitRequest init;
  *init.mutable_id() = Id("worker-0", 1);
  for (auto [key, length] : {std::pair<int, int>{0, 8}, {1, 4}}) {
    auto* part = init.add_parts();
    part->set_key(key);
    part->set_length(length);
  }
  init.set_data(Floats(12, 0.5f));
  seeds.push_back('\0' + init.SerializeAsString());
  for (int encoding :
       {kubeps::v1::FLOAT32, kubeps::v1::FLOAT16, kubeps::v1::BFLOAT16, kubeps::v1::TWO_BIT}) {
    for (int rank : {0, 1}) {
      kubeps::v1::PushRequest push;
      *push.mutable_id() = Id(rank == 0 ? "worker-0" : "worker-1", 2 + encoding);
      push.set_worker_rank(rank);
      push.set_step(0);
      *push.mutable_parts() = init.parts();
      push.set_encoding(static_cast<kubeps::v1::GradientEncoding>(encoding));
      const size_t bytes = encoding == kubeps::v1::FLOAT32   ? 48
                           : encoding == kubeps::v1::TWO_BIT ? 4
                                                             : 24;
      push.set_data(std::string(bytes, '\x11'));
      if (encoding == kubeps::v1::TWO_BIT) push.set_threshold(0.5f);
      seeds.push_back('\1' + push.SerializeAsString());
    }
  }
  kubeps::v1::PullRequest pull;
  *pull.mutable_parts() = init.parts();
  pull.set_min_version(1);
  pull.set_wait_ms(5);
  seeds.push_back('\2' + pull.SerializeAsString());
  for (int rank : {0, 1}) {
    kubeps::v1::PushRequest push;
    *push.mutable_id() = Id(rank == 0 ? "worker-0" : "worker-1", 10);
    push.set_worker_rank(rank);
    push.set_step(1);
    *push.mutable_parts() = init.parts();
    push.set_data(Floats(12, 0.25f));
    *push.mutable_then_pull() = pull;
    push.mutable_then_pull()->set_min_version(2);
    seeds.push_back('\3' + push.SerializeAsString());
  }
  return seeds;
}
