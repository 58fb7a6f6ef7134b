// The KV client end to end, in one process: a scheduler and two parameter
// server shards on real gRPC servers (127.0.0.1, ephemeral ports), and two
// KVWorker clients in two threads training a few sync steps with SGD
// (learning rate 1), so every expected parameter is plain arithmetic.
// Also the ResendCaller's bounded failure against a dead address.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/optimizer.h"
#include "common/resend.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/ps_service.h"
#include "ps-server/scheduler_service.h"
#include "ps-server/shard.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/segment_file.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr int kServers = 2;
constexpr int kWorkers = 2;
const char* kToken = "job-token";

std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  return builder.BuildAndStart();
}

// A job's server side: the scheduler and kServers shards, running.
class Job {
 public:
  Job() {
    SchedulerOptions options;
    options.num_servers = kServers;
    options.num_workers = kWorkers;
    options.token = JobToken::Fixed(kToken);
    scheduler_ = std::make_unique<SchedulerService>(options, &NullMetrics());
    scheduler_server_ = Serve(scheduler_.get(), &scheduler_port_);

    if (Status s = MetricsServer::Start("", -1, {}, &shard_metrics_); !s.ok()) {
      register_status_ = grpc::Status(grpc::StatusCode::INTERNAL, s.message());
      return;
    }
    ShardOptions shard_options;
    shard_options.sync = true;
    shard_options.num_workers = kWorkers;
    shard_options.optimizer.name = "sgd";
    shard_options.optimizer.learning_rate = 1.0f;
    for (int i = 0; i < kServers; ++i) {
      std::string error;
      auto optimizer = MakeOptimizer(shard_options.optimizer, &error);
      shards_.push_back(
          std::make_unique<Shard>(shard_options, std::move(optimizer), shard_metrics_.get()));
      services_.push_back(std::make_unique<ParameterServerService>(
          shards_.back().get(), JobToken::Fixed(kToken), nullptr));
      int port = 0;
      shard_servers_.push_back(Serve(services_.back().get(), &port));
      shard_ports_.push_back(port);
    }
    // The shards register over the wire with the job's token, as
    // kubeps-server would (highest rank first: ranks follow the names).
    auto stub = v1::Scheduler::NewStub(OpenChannel(SchedulerAddress()));
    for (int i = kServers - 1; i >= 0; --i) {
      v1::RegisterRequest request;
      request.mutable_node()->set_node_id("server-" + std::to_string(i));
      request.mutable_node()->set_role(v1::SERVER);
      request.mutable_node()->set_address(ShardAddress(i));
      request.mutable_node()->set_incarnation(1);
      v1::RegisterResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + 5s);
      context.AddMetadata(kTokenMetadataKey, kToken);
      register_status_ = stub->Register(&context, request, &response);
      if (!register_status_.ok()) break;
      if (response.rank() != i) {
        register_status_ =
            grpc::Status(grpc::StatusCode::INTERNAL, "server-" + std::to_string(i) + " got rank " +
                                                         std::to_string(response.rank()));
        break;
      }
    }
  }
  ~Job() {
    auto deadline = std::chrono::system_clock::now() + 2s;
    for (auto& s : shard_servers_)
      if (s) s->Shutdown(deadline);
    if (scheduler_server_) scheduler_server_->Shutdown(deadline);
  }

  std::string error() const { return register_status_.error_message(); }
  bool ok() const {
    if (!scheduler_server_ || !register_status_.ok()) return false;
    for (const auto& s : shard_servers_)
      if (!s) return false;
    return true;
  }
  std::string SchedulerAddress() const { return "127.0.0.1:" + std::to_string(scheduler_port_); }
  std::string ShardAddress(int i) const { return "127.0.0.1:" + std::to_string(shard_ports_[i]); }
  Shard& shard(int i) { return *shards_[i]; }
  // Push requests the shards applied, all together.
  double AppliedPushes() const {
    double total = 0;
    for (const auto& family : shard_metrics_->registry().Collect()) {
      if (family.name != "kubeps_server_pushes_total") continue;
      for (const auto& metric : family.metric) total += metric.counter.value;
    }
    return total;
  }
  SchedulerService& scheduler() { return *scheduler_; }

  KVOptions WorkerOptions(int index) const {
    KVOptions options;
    options.scheduler_address = SchedulerAddress();
    options.node_id = "worker-" + std::to_string(index);
    options.token = kToken;
    options.resend.timeout_ms = 2000;
    options.resend.max_resends = 3;
    options.pull_wait_ms = 100;
    options.peer_wait_limit_ms = 10000;  // a broken test fails instead of hanging
    options.heartbeat_interval_ms = 100;
    // Small bounds so that tensor 1 (20 elements) is sliced over both
    // servers and every slice is cut into several chunks.
    options.placement.big_array_bound = 8;
    options.placement.max_part_elems = 3;
    return options;
  }

 private:
  std::unique_ptr<SchedulerService> scheduler_;
  std::unique_ptr<grpc::Server> scheduler_server_;
  int scheduler_port_ = 0;
  std::unique_ptr<MetricsServer> shard_metrics_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterServerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> shard_servers_;
  std::vector<int> shard_ports_;
  grpc::Status register_status_;
};

const std::vector<uint64_t> kSizes = {3, 20, 1};
constexpr int kSteps = 3;

// Rank 0's initial values; rank 1 offers -7 everywhere, which must lose.
float Initial(int rank, uint32_t key, uint64_t i) { return rank == 0 ? 10.0f * key + i : -7.0f; }
// Gradient of worker `rank` at step `step`: exact in float, mean exact too.
float Grad(int rank, int step, uint64_t i) { return (rank + 1) * (step + 1) + 0.25f * i; }
// Parameter after `steps` sync steps with SGD lr 1: w0 - sum of the means,
// the mean at step s being 1.5 (s + 1) + 0.25 i.
float Expected(uint32_t key, uint64_t i, int steps) {
  double w = 10.0 * key + i;
  for (int s = 0; s < steps; ++s) w -= 1.5 * (s + 1) + 0.25 * i;
  return static_cast<float>(w);
}

struct WorkerResult {
  std::vector<std::string> errors;
  int rank = -1;
  int size = 0;
  int num_servers = 0;
  std::vector<Part> parts;
  std::pair<int, int> placed;  // keys whose values, gradients lie in shared memory
  std::vector<std::vector<float>> after_init;
  std::vector<std::vector<std::vector<float>>> after_step;  // [step][key][i]
};

#define CHECK_OK(expr, what)                                            \
  do {                                                                  \
    Status _s = (expr);                                                 \
    if (!_s.ok()) {                                                     \
      result.errors.push_back(std::string(what) + ": " + _s.message()); \
      return result;                                                    \
    }                                                                   \
  } while (0)

// Deletes the files of /dev/shm whose names start with `prefix`: a server
// can no longer map them (the worker keeps its own mapping).
void UnlinkSegments(const std::string& prefix) {
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(entry);
  }
}

// The kSizes tensors of worker `rank`: its initial values, gradients (set
// per step) and values to pull into, with the pointers KVWorker takes.
struct WorkerTensors {
  explicit WorkerTensors(int rank)
      : init(kSizes.size()), grads(kSizes.size()), values(kSizes.size()) {
    for (uint32_t k = 0; k < kSizes.size(); ++k) {
      for (uint64_t i = 0; i < kSizes[k]; ++i) init[k].push_back(Initial(rank, k, i));
      values[k].assign(kSizes[k], 12345.0f);
      grads[k].assign(kSizes[k], 0.0f);
      init_ptrs.push_back(init[k].data());
      grad_ptrs.push_back(grads[k].data());
      grad_out.push_back(grads[k].data());
      value_ptrs.push_back(values[k].data());
    }
  }
  // Moves the tensors into the KV client's shared-memory regions, as a
  // model that lives there (RemoteStore); the number of keys placed, values
  // and gradients. A key without a region keeps its own buffer.
  std::pair<int, int> Place(KVWorker* kv) {
    std::pair<int, int> placed;
    for (uint32_t k = 0; k < kSizes.size(); ++k) {
      if (float* v = kv->SharedValues(k)) {
        value_ptrs[k] = v;
        ++placed.first;
      }
      if (float* g = kv->SharedGrads(k)) {
        grad_ptrs[k] = grad_out[k] = g;
        ++placed.second;
      }
    }
    return placed;
  }
  void SetGrads(int rank, int step) {
    for (uint32_t k = 0; k < kSizes.size(); ++k) {
      for (uint64_t i = 0; i < kSizes[k]; ++i) grad_out[k][i] = Grad(rank, step, i);
    }
  }
  std::vector<std::vector<float>> Values() const {
    std::vector<std::vector<float>> out;
    for (uint32_t k = 0; k < kSizes.size(); ++k)
      out.emplace_back(value_ptrs[k], value_ptrs[k] + kSizes[k]);
    return out;
  }
  std::vector<std::vector<float>> init, grads, values;
  std::vector<const float*> init_ptrs, grad_ptrs;
  std::vector<float*> grad_out, value_ptrs;
};

// The segment of this process's worker `node_id`, as a shard would name it.
std::string SegmentPrefix(const KVOptions& options) {
  return "kubeps-" + options.node_id + "-" + std::to_string(::getpid());
}

// Barrier "end" and Finish: "" or what failed.
std::string EndWorker(KVWorker* kv) {
  if (Status s = kv->Barrier("end"); !s.ok()) return "Barrier: " + s.message();
  if (Status s = kv->Finish(); !s.ok()) return "Finish: " + s.message();
  return "";
}

// Every worker returned, within `limit`, and with no error.
void ExpectWorkersSucceed(std::vector<std::future<std::string>>* workers,
                          std::chrono::seconds limit) {
  for (auto& worker : *workers) {
    ASSERT_EQ(worker.wait_for(limit), std::future_status::ready) << "a worker hung";
    EXPECT_EQ(worker.get(), "");
  }
}

WorkerResult RunWorker(const KVOptions& options, bool unmappable = false, bool in_place = false) {
  WorkerResult result;
  std::unique_ptr<KVWorker> kv;
  CHECK_OK(KVWorker::Start(options, &kv), "Start");
  result.rank = kv->rank();
  result.size = kv->size();
  result.num_servers = kv->num_servers();
  const int rank = kv->rank();

  WorkerTensors tensors(rank);
  const auto& grad_ptrs = tensors.grad_ptrs;
  const auto& value_ptrs = tensors.value_ptrs;
  CHECK_OK(kv->InitTensors(tensors.init_ptrs, kSizes), "InitTensors");
  if (in_place) result.placed = tensors.Place(kv.get());
  if (unmappable) UnlinkSegments(SegmentPrefix(options));
  result.parts = kv->parts();
  // Unmappable: the first request to each shard is a push, so that it is the
  // push that finds out (a pull would, and no push would offer the segment).
  if (!unmappable) {
    CHECK_OK(kv->Wait(kv->Pull(value_ptrs, 0)), "Pull 0");
    result.after_init = tensors.Values();
  }

  for (int step = 0; step < kSteps; ++step) {
    tensors.SetGrads(rank, step);
    if (step < kSteps - 1) {
      CHECK_OK(kv->Wait(kv->Push(grad_ptrs, step)), "Push");
      CHECK_OK(kv->Wait(kv->Pull(value_ptrs, step + 1)), "Pull");
    } else {
      CHECK_OK(kv->Wait(kv->PushPull(grad_ptrs, value_ptrs, step)), "PushPull");
    }
    result.after_step.push_back(tensors.Values());
  }
  // Selecting keys: a null pointer leaves a key out. The version pulled is
  // the step the parameters are of (what a restarted process resumes from).
  std::vector<float> only_key2(1, 0.0f);
  uint64_t version = 0;
  CHECK_OK(kv->WaitWithVersion(kv->Pull({nullptr, nullptr, only_key2.data()}, 0), &version),
           "Pull key 2");
  if (only_key2[0] != Expected(2, 0, kSteps))
    result.errors.push_back("Pull of key 2 alone is wrong");
  if (version != static_cast<uint64_t>(kSteps)) {
    result.errors.push_back("Pull of key 2 reports version " + std::to_string(version) + ", want " +
                            std::to_string(kSteps));
  }

  if (std::string ended = EndWorker(kv.get()); !ended.empty()) result.errors.push_back(ended);
  return result;
}

// Every gradient here is exact in 16 bits, so the 16-bit encodings of
// spec.compression, through the real wire, end at the very same numbers.
// So do the transports: gRPC alone, shared memory (the shards are on
// 127.0.0.1), shared memory the shards cannot map (the worker's first push
// to each is refused unread and sent again over gRPC, the same id), and
// shared memory with the worker's tensors in its segment (a model that
// lives there: nothing is copied in the worker; gradients only where
// pushes are float32, whose staging holds float32).
class KVWorkerTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};
INSTANTIATE_TEST_SUITE_P(
    CompressionAndTransport, KVWorkerTest,
    ::testing::Combine(::testing::Values("none", "bf16", "fp16"),
                       ::testing::Values("tcp", "shared", "unmappable", "in_place")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST_P(KVWorkerTest, TwoWorkersTrainSyncStepsAgainstTwoShards) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const bool unmappable = std::get<1>(GetParam()) == "unmappable";
  auto start = std::chrono::steady_clock::now();
  std::vector<std::future<WorkerResult>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    const auto& [compression, transport] = GetParam();
    options.compression = compression;
    options.shared_memory = transport != "tcp";
    const bool in_place = transport == "in_place";
    workers.push_back(std::async(std::launch::async, [options, unmappable, in_place] {
      return RunWorker(options, unmappable, in_place);
    }));
  }
  std::vector<WorkerResult> results;
  for (auto& f : workers) {
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready) << "a worker hung";
    results.push_back(f.get());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);

  std::set<int> ranks;
  for (const WorkerResult& r : results) {
    for (const auto& e : r.errors) ADD_FAILURE() << "worker " << r.rank << ": " << e;
    if (!r.errors.empty()) continue;
    ranks.insert(r.rank);
    EXPECT_EQ(r.size, kWorkers);
    EXPECT_EQ(r.num_servers, kServers);
    if (std::get<1>(GetParam()) == "in_place") {
      const int keys = static_cast<int>(kSizes.size());
      EXPECT_EQ(r.placed, std::make_pair(keys, std::get<0>(GetParam()) == "none" ? keys : 0));
    }

    // Initial values: rank 0's, for both workers.
    ASSERT_EQ(r.after_init.size(), unmappable ? 0 : kSizes.size());
    for (uint32_t k = 0; k < r.after_init.size(); ++k) {
      for (uint64_t i = 0; i < kSizes[k]; ++i) {
        EXPECT_EQ(r.after_init[k][i], Initial(0, k, i))
            << "rank " << r.rank << " key " << k << " [" << i << "]";
      }
    }
    // After every step: w0 - sum of the mean gradients.
    ASSERT_EQ(r.after_step.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        for (uint64_t i = 0; i < kSizes[k]; ++i) {
          EXPECT_EQ(r.after_step[s][k][i], Expected(k, i, s + 1))
              << "rank " << r.rank << " step " << s << " key " << k << " [" << i << "]";
        }
      }
    }

    // Tensor 1 is sliced over both servers and chunked; the others are whole.
    std::set<int> servers_of_key1;
    int chunks_of_key1 = 0;
    for (const Part& p : r.parts) {
      EXPECT_LE(p.length, 3u);
      if (p.key == 1) {
        servers_of_key1.insert(p.server);
        ++chunks_of_key1;
      }
    }
    EXPECT_EQ(servers_of_key1, (std::set<int>{0, 1}));
    EXPECT_GE(chunks_of_key1, 4);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_TRUE(job.scheduler().scheduler().AllWorkersFinished());

  // The shards hold the same numbers, each its own slice, at version kSteps.
  if (!results.empty() && results[0].errors.empty()) {
    int parts_per_shard[kServers] = {0, 0};
    for (const Part& p : results[0].parts) {
      Shard& shard = job.shard(p.server);
      EXPECT_EQ(shard.PartVersion(p.key, p.offset), static_cast<uint64_t>(kSteps));
      std::vector<float> stored = shard.PartValue(p.key, p.offset);
      ASSERT_EQ(stored.size(), p.length)
          << "key " << p.key << " offset " << p.offset << " on server " << p.server;
      for (uint64_t j = 0; j < p.length; ++j)
        EXPECT_EQ(stored[j], Expected(p.key, p.offset + j, kSteps));
      // Each part lives on exactly one shard.
      EXPECT_TRUE(job.shard(1 - p.server).PartValue(p.key, p.offset).empty())
          << "key " << p.key << " offset " << p.offset << " is on both shards";
      ++parts_per_shard[p.server];
    }
    EXPECT_GT(parts_per_shard[0], 0);
    EXPECT_GT(parts_per_shard[1], 0);
  }
  // Every push touches both shards. Over TCP its parts go in pieces of
  // max_part_elems, several requests a shard; through shared memory, once
  // the shards map the segment, in one request a shard.
  const double one_per_shard = kWorkers * kServers * kSteps;
  if (std::get<1>(GetParam()) == "shared" || std::get<1>(GetParam()) == "in_place") {
    EXPECT_EQ(job.AppliedPushes(), one_per_shard);
  } else {
    EXPECT_GT(job.AppliedPushes(), one_per_shard);
  }
}

// The pod's agent lays a program's tensors out in the KV client's segment at
// the session's declare, before InitTensors (segment_file.h): the regions are
// there at once, InitTensors keeps them, and so does a restarted program's
// declare of the same tensors. A client that reaches its servers over TCP
// alone has no segment to offer.
TEST(KVWorkerSegmentTest, TensorsLaidOutBeforeInitStayWhereTheyAre) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = w == 0;  // worker 1: TCP only
    workers.push_back(std::async(std::launch::async, [options]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
      const std::optional<SegmentFile> segment = PrepareSegment(kv.get(), kSizes);
      if (!options.shared_memory) {
        if (segment) return "a TCP-only client offered a segment";
      } else if (!segment || segment->path.rfind("/dev/shm/kubeps-", 0) != 0) {
        return "no segment in /dev/shm: " + (segment ? segment->path : std::string("none"));
      }
      std::vector<float*> laid_out;
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        float* values = kv->SharedValues(k);
        if (segment &&
            (reinterpret_cast<char*>(values) < segment->base ||
             reinterpret_cast<char*>(values + kSizes[k]) > segment->base + segment->bytes)) {
          return "key " + std::to_string(k) + "'s values lie outside the segment";
        }
        laid_out.push_back(values);
      }
      WorkerTensors tensors(kv->rank());
      if (Status s = kv->InitTensors(tensors.init_ptrs, kSizes); !s.ok())
        return "InitTensors: " + s.message();
      const std::optional<SegmentFile> again = PrepareSegment(kv.get(), kSizes);
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        if (kv->SharedValues(k) != laid_out[k]) return "InitTensors moved key " + std::to_string(k);
      }
      if (segment && (!again || again->path != segment->path))
        return "a second declare of the same tensors got another segment";
      if (segment) {
        tensors.Place(kv.get());
        if (Status s = kv->Wait(kv->Pull(tensors.value_ptrs, 0)); !s.ok())
          return "Pull: " + s.message();
        for (uint32_t k = 0; k < kSizes.size(); ++k) {
          for (uint64_t i = 0; i < kSizes[k]; ++i) {
            if (laid_out[k][i] != Initial(0, k, i)) return "rank 0's values did not land";
          }
        }
      }
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 30s);
}

// A model of many small tensors, each server holding more parts than one
// request may name: through shared memory, where a batch may hold 8M
// elements, the KV client still closes it at the servers' bound of parts
// (a server refuses a request past it, an Init too).
TEST(KVWorkerBatchTest, AServerHoldingMorePartsThanOneRequestMayNameIsServed) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const size_t tensors = 2 * kMaxPartsPerRequest + 10;  // about half on each server
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = true;
    workers.push_back(std::async(std::launch::async, [options, tensors]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
      std::vector<float> init(tensors), grads(tensors, kv->rank() + 1.0f), values(tensors, -1);
      std::vector<const float*> init_ptrs, grad_ptrs;
      std::vector<float*> value_ptrs;
      for (size_t k = 0; k < tensors; ++k) {
        init[k] = static_cast<float>(k);
        init_ptrs.push_back(&init[k]);
        grad_ptrs.push_back(&grads[k]);
        value_ptrs.push_back(&values[k]);
      }
      if (Status s = kv->InitTensors(init_ptrs, std::vector<uint64_t>(tensors, 1)); !s.ok())
        return "InitTensors: " + s.message();
      if (Status s = kv->Wait(kv->PushPull(grad_ptrs, value_ptrs, 0)); !s.ok())
        return "PushPull: " + s.message();
      // SGD, learning rate 1, the mean of 1 and 2.
      for (size_t k = 0; k < tensors; ++k) {
        if (values[k] != static_cast<float>(k) - 1.5f)
          return "tensor " + std::to_string(k) + " is " + std::to_string(values[k]);
      }
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 60s);
}

// PushPull is one call per batch (ParameterServer.PushPull) whose pull waits
// at most pull_wait_ms (100 ms here). A peer 600 ms late leaves worker 0's
// calls unanswered: its push is applied once, and its pull goes on as Pull
// calls until the step completes. Unmappable: the shards cannot map the
// workers' segments, and the first request each sees is a PushPull, whose
// push is refused unread and sent again, the same id, with its bytes.
class KVWorkerPushPullTest : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Transport, KVWorkerPushPullTest,
                         ::testing::Values("tcp", "shared", "unmappable"));

TEST_P(KVWorkerPushPullTest, ALatePeersStepIsPulledAfterTheCallsLongPollSlice) {
  Job job;
  ASSERT_TRUE(job.ok()) << job.error();
  const bool unmappable = GetParam() == "unmappable";
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    KVOptions options = job.WorkerOptions(w);
    options.shared_memory = GetParam() != "tcp";
    workers.push_back(std::async(std::launch::async, [options, unmappable]() -> std::string {
      std::unique_ptr<KVWorker> kv;
      if (Status s = KVWorker::Start(options, &kv); !s.ok()) return "Start: " + s.message();
      const int rank = kv->rank();
      WorkerTensors tensors(rank);
      tensors.SetGrads(rank, 0);
      if (Status s = kv->InitTensors(tensors.init_ptrs, kSizes); !s.ok())
        return "InitTensors: " + s.message();
      if (unmappable) UnlinkSegments(SegmentPrefix(options));
      if (rank == 1) std::this_thread::sleep_for(600ms);
      const auto start = std::chrono::steady_clock::now();
      uint64_t version = 0;
      if (Status s =
              kv->WaitWithVersion(kv->PushPull(tensors.grad_ptrs, tensors.value_ptrs, 0), &version);
          !s.ok()) {
        return "PushPull: " + s.message();
      }
      if (rank == 0 && std::chrono::steady_clock::now() - start < 400ms)
        return "worker 0's PushPull returned before its peer pushed";
      if (version != 1) return "PushPull's values are of version " + std::to_string(version);
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        for (uint64_t i = 0; i < kSizes[k]; ++i) {
          if (tensors.values[k][i] != Expected(k, i, 1)) {
            return "key " + std::to_string(k) + " [" + std::to_string(i) + "] is " +
                   std::to_string(tensors.values[k][i]) + ", want " +
                   std::to_string(Expected(k, i, 1));
          }
        }
      }
      return EndWorker(kv.get());
    }));
  }
  ExpectWorkersSucceed(&workers, 30s);
  // Each worker's push of each part applied once: every part at version 1.
  for (int server = 0; server < kServers; ++server) {
    for (uint32_t k = 0; k < kSizes.size(); ++k) {
      for (uint64_t offset = 0; offset < kSizes[k]; ++offset) {
        if (job.shard(server).PartValue(k, offset).empty()) continue;
        EXPECT_EQ(job.shard(server).PartVersion(k, offset), 1u) << "key " << k << " @" << offset;
      }
    }
  }
}

// A port on which nothing listens: bound once, then closed.
int DeadPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(ResendCallerTest, DeadPeerFailsAfterMaxResendsPlusOneTriesInBoundedTime) {
  const std::string address = "127.0.0.1:" + std::to_string(DeadPort());
  auto stub = v1::ParameterServer::NewStub(OpenChannel(address));
  ResendPolicy policy;
  policy.timeout_ms = 50;
  policy.max_resends = 3;
  policy.backoff_base_ms = 10;
  policy.backoff_cap_ms = 40;
  ResendCaller caller(policy, nullptr, &NullMetrics());

  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-0");
  v1::PushResponse response;
  int attempts = 0;
  const std::string peer = "server 1 (" + address + ")";
  auto start = std::chrono::steady_clock::now();
  Status s = caller.Call(peer, "Push", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Push(&c, request, &response);
  });
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 4);
  EXPECT_THAT(s.message(), HasSubstr("Push"));
  EXPECT_THAT(s.message(), HasSubstr(peer));
  EXPECT_THAT(s.message(), HasSubstr("4 tries"));
  // 4 attempts of 50 ms plus 3 backoffs of at most 10 + 20 + 40 ms.
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
}

TEST(ResendCallerTest, NonRetryableErrorIsNotResent) {
  ShardOptions options;
  options.num_workers = 1;
  std::string error;
  Shard shard(options, MakeOptimizer(options.optimizer, &error), &NullMetrics());
  ParameterServerService service(&shard, JobToken::Fixed(kToken), nullptr);
  int port = 0;
  auto server = Serve(&service, &port);
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto stub = v1::ParameterServer::NewStub(OpenChannel(address));
  ResendPolicy policy;
  policy.timeout_ms = 2000;
  policy.max_resends = 5;

  // A push of a part the shard does not store: INVALID_ARGUMENT, once.
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-0");
  request.set_worker_rank(0);
  auto* part = request.add_parts();
  part->set_key(9);
  part->set_length(1);
  request.set_data(std::string(4, '\0'));
  v1::PushResponse response;
  int attempts = 0;
  ResendCaller caller(policy, JobToken::Fixed(kToken), &NullMetrics());
  Status s = caller.Call("server 0", "Push", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Push(&c, request, &response);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(s.message(), HasSubstr("key 9"));
  EXPECT_THAT(s.message(), HasSubstr("Push to server 0"));
  // The message must report the attempts actually made, not the most allowed.
  EXPECT_THAT(s.message(), HasSubstr("failed after 1 tr"))
      << "BUG: a non-retryable failure after one attempt is reported as max_resends + 1 tries";

  // Without the job's token: UNAUTHENTICATED, not resent either.
  attempts = 0;
  ResendCaller no_token(policy, nullptr, &NullMetrics());
  v1::PullRequest pull;
  v1::PullResponse pull_response;
  s = no_token.Call("server 0", "Pull", [&](grpc::ClientContext& c) {
    ++attempts;
    return stub->Pull(&c, pull, &pull_response);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(attempts, 1);
  EXPECT_THAT(s.message(), HasSubstr("token"));
  server->Shutdown(std::chrono::system_clock::now() + 1s);
}

}  // namespace
}  // namespace kubeps
