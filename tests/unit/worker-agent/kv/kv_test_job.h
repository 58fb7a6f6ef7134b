// What the KV client's end-to-end tests share: a job's server side in one
// process (a scheduler and kServers shards on real gRPC servers, 127.0.0.1,
// ephemeral ports, SGD with learning rate 1) and the tensors of a worker whose
// every expected parameter is plain arithmetic.
#ifndef KUBEPS_TESTS_UNIT_WORKER_AGENT_KV_KV_TEST_JOB_H_
#define KUBEPS_TESTS_UNIT_WORKER_AGENT_KV_KV_TEST_JOB_H_

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

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

namespace kubeps::kv_testing {

using namespace std::chrono_literals;

inline constexpr int kServers = 2;
inline constexpr int kWorkers = 2;
inline constexpr char kToken[] = "job-token";

inline std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  return builder.BuildAndStart();
}

struct JobOptions {
  // The shards keep big parts' values in files of /dev/shm that a worker of
  // this host maps instead of having them landed (KVOptions::map_values).
  bool map_values = false;
  // The address shard `i` registers, given the one it listens on: another
  // in front of it (a proxy). Unset: its own.
  std::function<std::string(int i, const std::string& listening)> front;
  // The servers' optimizer none: the workers' programs keep the parameters.
  bool workers_keep_parameters = false;
  bool async = false;
  // SchedulerOptions::replace_silent_after_ms: a restarted worker's wait.
  int replace_silent_after_ms = 1500;
  // elastic.elastic: the workers may change (its initial_workers stands for
  // kWorkers).
  ElasticOptions elastic;
};

// A job's server side: the scheduler and kServers shards, running.
class Job {
 public:
  explicit Job(JobOptions job_options = {}) {
    SchedulerOptions options;
    options.num_servers = kServers;
    options.num_workers = kWorkers;
    options.token = JobToken::Fixed(kToken);
    options.workers_keep_parameters = job_options.workers_keep_parameters;
    options.sync = !job_options.async;
    options.replace_silent_after_ms = job_options.replace_silent_after_ms;
    options.elastic = job_options.elastic;
    if (options.elastic.elastic) options.num_workers = options.elastic.initial_workers;
    scheduler_ = std::make_unique<SchedulerService>(options, &NullMetrics());
    scheduler_server_ = Serve(scheduler_.get(), &scheduler_port_);

    if (Status s = MetricsServer::Start("", -1, {}, &shard_metrics_); !s.ok()) {
      register_status_ = grpc::Status(grpc::StatusCode::INTERNAL, s.message());
      return;
    }
    ShardOptions shard_options;
    shard_options.sync = !job_options.async;
    shard_options.num_workers = kWorkers;
    shard_options.optimizer.name = "sgd";
    shard_options.optimizer.learning_rate = 1.0f;
    for (int i = 0; i < kServers; ++i) {
      if (job_options.map_values)
        shard_options.shared_values_owner = "kv-test-server-" + std::to_string(i);
      std::string error;
      auto optimizer = MakeOptimizer(shard_options.optimizer, &error);
      shards_.push_back(
          std::make_unique<Shard>(shard_options, std::move(optimizer), shard_metrics_.get()));
      services_.push_back(std::make_unique<ParameterServerService>(
          shards_.back().get(), JobToken::Fixed(kToken), nullptr));
      int port = 0;
      shard_servers_.push_back(Serve(services_.back().get(), &port));
      const std::string listening = "127.0.0.1:" + std::to_string(port);
      shard_addresses_.push_back(job_options.front ? job_options.front(i, listening) : listening);
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
  std::string ShardAddress(int i) const { return shard_addresses_[i]; }
  Shard& shard(int i) { return *shards_[i]; }
  // Shard `i` answers no more requests: its process is gone, its pod being
  // replaced.
  void StopShard(int i) {
    shard_servers_[i]->Shutdown(std::chrono::system_clock::now());
    shard_servers_[i].reset();
  }
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
    // servers and every slice is cut into several chunks, each a request.
    options.placement.big_array_bound = 8;
    options.placement.max_part_elems = 3;
    options.tcp_request_elems = 3;
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
  std::vector<std::string> shard_addresses_;  // as registered
  grpc::Status register_status_;
};

inline const std::vector<uint64_t> kSizes = {3, 20, 1};
inline constexpr int kSteps = 3;

// Rank 0's initial values; rank 1 offers -7 everywhere, which must lose.
inline float Initial(int rank, uint32_t key, uint64_t i) {
  return rank == 0 ? 10.0f * key + i : -7.0f;
}
// Gradient of worker `rank` at step `step`: exact in float, mean exact too.
inline float Grad(int rank, int step, uint64_t i) { return (rank + 1) * (step + 1) + 0.25f * i; }
// Parameter after `steps` sync steps with SGD lr 1: w0 - sum of the means,
// the mean at step s being 1.5 (s + 1) + 0.25 i.
inline float Expected(uint32_t key, uint64_t i, int steps) {
  double w = 10.0 * key + i;
  for (int s = 0; s < steps; ++s) w -= 1.5 * (s + 1) + 0.25 * i;
  return static_cast<float>(w);
}

// Deletes the files of /dev/shm whose names start with `prefix`: a server
// can no longer map them (the worker keeps its own mapping).
inline void UnlinkSegments(const std::string& prefix) {
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

// "" if `tensors` hold the parameters after `steps` steps, else the first
// value that differs.
inline std::string CheckValues(const WorkerTensors& tensors, int steps) {
  for (uint32_t k = 0; k < kSizes.size(); ++k) {
    for (uint64_t i = 0; i < kSizes[k]; ++i) {
      if (tensors.value_ptrs[k][i] != Expected(k, i, steps)) {
        return "key " + std::to_string(k) + " [" + std::to_string(i) + "] is " +
               std::to_string(tensors.value_ptrs[k][i]) + ", want " +
               std::to_string(Expected(k, i, steps));
      }
    }
  }
  return "";
}

// The segment of this process's worker `node_id`, as a shard would name it.
inline std::string SegmentPrefix(const KVOptions& options) {
  return "kubeps-" + options.node_id + "-" + std::to_string(::getpid());
}

// `count` workers started against `job` (`options` changed as `adjust`
// says), or none where one failed to.
inline std::vector<std::unique_ptr<KVWorker>> StartWorkers(
    Job& job, int count = kWorkers, const std::function<void(KVOptions*)>& adjust = {}) {
  std::vector<std::future<std::unique_ptr<KVWorker>>> starting;
  for (int w = 0; w < count; ++w) {
    KVOptions options = job.WorkerOptions(w);
    if (adjust) adjust(&options);
    starting.push_back(std::async(std::launch::async, [options] {
      std::unique_ptr<KVWorker> kv;
      EXPECT_TRUE(KVWorker::Start(options, &kv).ok());
      return kv;
    }));
  }
  std::vector<std::unique_ptr<KVWorker>> workers;
  for (auto& f : starting) {
    if (f.wait_for(30s) != std::future_status::ready) return {};
    workers.push_back(f.get());
    if (!workers.back()) return {};
  }
  return workers;
}

// Every worker declares its tensors (rank w with tensors[w]'s initial
// values), all at once as a job's workers do: "" or what failed.
inline std::string InitAll(const std::vector<std::unique_ptr<KVWorker>>& workers,
                           std::vector<WorkerTensors>& tensors) {
  std::vector<std::future<Status>> inits;
  for (size_t w = 0; w < workers.size(); ++w) {
    inits.push_back(std::async(std::launch::async, [&, w] {
      return workers[w]->InitTensors(tensors[w].init_ptrs, kSizes);
    }));
  }
  std::string failed;
  for (auto& init : inits) {
    if (Status s = init.get(); !s.ok()) failed = "InitTensors: " + s.message();
  }
  return failed;
}

// Barrier "end" and Finish: "" or what failed.
inline std::string EndWorker(KVWorker* kv) {
  if (Status s = kv->Barrier("end"); !s.ok()) return "Barrier: " + s.message();
  if (Status s = kv->Finish(); !s.ok()) return "Finish: " + s.message();
  return "";
}

// Every worker returned, within `limit`, and with no error.
inline void ExpectWorkersSucceed(std::vector<std::future<std::string>>* workers,
                                 std::chrono::seconds limit) {
  for (auto& worker : *workers) {
    ASSERT_EQ(worker.wait_for(limit), std::future_status::ready) << "a worker hung";
    EXPECT_EQ(worker.get(), "");
  }
}

}  // namespace kubeps::kv_testing

#endif  // KUBEPS_TESTS_UNIT_WORKER_AGENT_KV_KV_TEST_JOB_H_
