// The scheduler's RPC handlers (ps-server/scheduler_service.h: Register,
// GetClusterView, Barrier, Heartbeat, Finish) on any request bytes, through
// gRPC in this process, against a job of 1 server and 2 workers. The first
// byte picks the method. The scheduler keeps the registrations earlier inputs
// made; it is made afresh every 500 inputs.
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "kubeps.pb.h"
#include "ps-server/scheduler_service.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/rpc_fuzzing.h"

namespace {

using kubeps::fuzz::InProcessServer;

const char* const kMethods[] = {"/kubeps.v1.Scheduler/Register",
                                "/kubeps.v1.Scheduler/GetClusterView",
                                "/kubeps.v1.Scheduler/Barrier", "/kubeps.v1.Scheduler/Heartbeat",
                                "/kubeps.v1.Scheduler/Finish"};

struct SchedulerUnderTest {
  SchedulerUnderTest() {
    kubeps::SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 2;
    options.token = kubeps::JobToken::Fixed(kubeps::fuzz::kToken);
    service = std::make_unique<kubeps::SchedulerService>(options, &kubeps::NullMetrics());
    server = std::make_unique<InProcessServer>(service.get());
  }
  std::unique_ptr<kubeps::SchedulerService> service;
  std::unique_ptr<InProcessServer> server;
};

kubeps::v1::NodeInfo Node(const char* id, kubeps::v1::Role role, const char* address) {
  kubeps::v1::NodeInfo node;
  node.set_node_id(id);
  node.set_role(role);
  node.set_address(address);
  node.set_incarnation(7);
  node.set_checkpoint_step(-1);
  return node;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SchedulerUnderTest& target = kubeps::fuzz::FreshEvery<SchedulerUnderTest>();
  kubeps::fuzz::RpcInput in = kubeps::fuzz::SplitInput(data, size, 5);
  if (in.method == 1) {
    in.body = kubeps::fuzz::WithShortWait<kubeps::v1::ClusterViewRequest>(in.body);
  } else if (in.method == 2) {
    in.body = kubeps::fuzz::WithShortWait<kubeps::v1::BarrierRequest>(in.body);
  }
  target.server->Call(kMethods[in.method], in.body, 1000);
  return 0;
}

// A job's life: a server and two workers register, ask for the view, pass a
// barrier, beat, finish.
std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  for (const auto& node :
       {Node("server-0", kubeps::v1::SERVER, "127.0.0.1:7001"),
        Node("worker-0", kubeps::v1::WORKER, ""), Node("worker-1", kubeps::v1::WORKER, "")}) {
    kubeps::v1::RegisterRequest request;
    *request.mutable_node() = node;
    seeds.push_back('\0' + request.SerializeAsString());
    kubeps::v1::HeartbeatRequest beat;
    beat.set_node_id(node.node_id());
    beat.set_incarnation(node.incarnation());
    beat.add_passed_barriers("init");
    seeds.push_back('\3' + beat.SerializeAsString());
  }
  kubeps::v1::ClusterViewRequest view;
  view.set_wait_ms(5);
  seeds.push_back('\1' + view.SerializeAsString());
  kubeps::v1::BarrierRequest barrier;
  barrier.set_name("init");
  barrier.set_rank(1);
  barrier.set_wait_ms(5);
  seeds.push_back('\2' + barrier.SerializeAsString());
  kubeps::v1::FinishRequest finish;
  finish.set_node_id("worker-0");
  finish.set_rank(0);
  finish.set_registration_key("not-the-key");
  seeds.push_back('\4' + finish.SerializeAsString());
  return seeds;
}
