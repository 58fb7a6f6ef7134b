// Goodput of the parameter-server data path: push, pull and push+pull of one
// float32 tensor (1M and 10M elements by default), 1 server x 1 worker and 2
// servers x 2 workers, next to plain loopback TCP timed in the same run.
//
//   build/bin/kv_goodput            (7 repetitions per row, medians)
//   build/bin/kv_goodput --quick    (3 short repetitions: a smoke run)
//   build/bin/kv_goodput --reps 11 --sizes 1M,10M,100K
//   build/bin/kv_goodput --sizes 10M --setups 2x2 --ops push+pull --grpc-only
//                                    (one row alone: what a profiler should see)
//
// One process holds the job's scheduler and shards (SchedulerService, and
// Shard behind ParameterServerService), each on its own gRPC server on
// 127.0.0.1 with kubeps-server's limits, and one thread per worker driving a
// KVWorker::Start client (with a connection of its own to each shard, as a
// worker's process has): the code a training job runs, with its placement
// (a tensor of 1M elements or more is sliced over every server, in parts of
// at most 2 MiB sent in requests of at most 4 MiB). The shards do not
// heartbeat; the data path does not depend on it. Workers move their tensor
// at the same time; a repetition times several operations from a common
// start to the last end.
//
// Mode: sync, SGD, as jobs train by default. push+pull is PushPull (push of
// step s, then pull of version s+1, which waits for every worker's push);
// pull asks for the version the shards hold. A sync push-only loop needs
// the workers in step (a second push of a step is ignored, a push of the
// next one refused until the step completes), so after each push they meet
// at an in-process barrier (microseconds); aggregation and update are timed.
//
// kubeps moves the tensor two ways, each measured: over gRPC (TCP to the
// shard, as between hosts) and through shared memory (KVOptions::
// shared_memory, what a worker and a server on one host use: kubeps run).
//
// TCP: one connection per worker, all at once. push sends the tensor's bytes
// and reads a 1-byte ack, pull the reverse, push+pull sends and reads back.
// GB/s: 1e9 payload bytes (push+pull counts both ways) per second, all
// workers together. Goals (issue 12): push+pull at least 50% of TCP at 10M
// and at least 1.0 GB/s at 1M, printed as PASS or BELOW. The exit code is 0
// either way (a measurement, not a test); 1 only when a call fails.
//
// Then what mutual TLS costs (spec.security.tls, issue 16): push+pull of the
// same job with and without TLS, taking turns, each side with certificates
// of one CA as a job's Secrets hold them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/certificate_authority.h"
#include "common/command_line.h"
#include "common/metrics.h"
#include "common/mutex_checks.h"
#include "common/resend.h"
#include "common/scheduler_client.h"
#include "common/tensor_memory.h"
#include "common/transport_security.h"
#include "ps-server/ps_service.h"
#include "ps-server/scheduler_service.h"
#include "ps-server/shard.h"
#include "worker-agent/kv/kv_worker.h"

namespace kubeps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kToken[] = "kv-goodput";

enum class Op { kPush, kPull, kPushPull };
const char* OpName(Op op) {
  return op == Op::kPush ? "push" : op == Op::kPull ? "pull" : "push+pull";
}

// A reusable barrier: each round releases its n threads together.
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t round = round_;
    if (++arrived_ < n_) {
      passed_.wait(lock, [&] { return round_ != round; });
    } else {
      arrived_ = 0;
      ++round_;
      passed_.notify_all();
    }
  }

 private:
  const int n_;
  std::mutex mutex_;
  std::condition_variable passed_;
  int arrived_ = 0;
  uint64_t round_ = 0;
};

// Runs body(0..n-1) on n threads released together; seconds until the last ends.
double TimeConcurrently(int n, const std::function<void(int)>& body) {
  Rendezvous start(n + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      start.ArriveAndWait();
      body(i);
    });
  start.ArriveAndWait();
  const Clock::time_point started = Clock::now();
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(Clock::now() - started).count();
}

std::unique_ptr<grpc::Server> Serve(grpc::Service* service, const TransportSecurity& security,
                                    int* port) {
  grpc::ServerBuilder builder;  // kubeps-server's settings (server_main.cc)
  builder.AddListeningPort("127.0.0.1:0", security.ServerCredentials(), port);
  ConfigureServer(&builder);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

std::string Loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

// A job's certificates in a temporary folder: a CA, one certificate the
// scheduler and the shards serve with, one the workers show.
class TlsFolders {
 public:
  Status Create() {
    char pattern[] = "/tmp/kv-goodput-tls-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return Status::Error("cannot make a temporary folder");
    root_ = pattern;
    CertificateAndKey ca;
    constexpr std::chrono::seconds kDay{86400};
    if (Status s = CreateJobCa("bench", "kv-goodput", kDay, &ca); !s.ok()) return s;
    for (const char* role : {"server", "worker"}) {
      CertificateAndKey replica;
      if (Status s = IssueReplicaCertificate(ca, {"bench", "kv-goodput", role, 0},
                                             {TransportSecurity::kServerName}, kDay, &replica);
          !s.ok())
        return s;
      const std::string dir = root_ + "/" + role;
      std::filesystem::create_directory(dir);
      std::ofstream(dir + "/" + TransportSecurity::kCaFile) << ca.certificate_pem;
      std::ofstream(dir + "/" + TransportSecurity::kCertificateFile) << replica.certificate_pem;
      const std::string key = dir + "/" + TransportSecurity::kKeyFile;
      std::ofstream(key) << replica.private_key_pem;
      ::chmod(key.c_str(), 0600);
    }
    return Status::Ok();
  }
  ~TlsFolders() {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  std::string servers() const { return root_ + "/server"; }
  std::string workers() const { return root_ + "/worker"; }

 private:
  std::string root_;
};

// A running job: scheduler, shards and workers, every tensor declared (key i
// has sizes[i] elements); with `tls`, every connection is mutual TLS; with
// `shared_memory`, tensors go through shared memory.
class Job {
 public:
  Status Start(int servers, int workers, const std::vector<uint64_t>& sizes,
               const TlsFolders* tls = nullptr, bool shared_memory = false) {
    std::shared_ptr<const TransportSecurity> security = TransportSecurity::Insecure();
    if (tls != nullptr) {
      if (Status s = TransportSecurity::FromDirectory(tls->servers(), &security); !s.ok()) return s;
    }
    SchedulerOptions scheduler_options;
    scheduler_options.num_servers = servers;
    scheduler_options.num_workers = workers;
    scheduler_options.token = JobToken::Fixed(kToken);
    // The shards do not beat: the scheduler is not to say, every 5 s of a
    // long row, that they fell silent (an hour: longer than any run).
    scheduler_options.dead_after_ms = 3600 * 1000;
    scheduler_ = std::make_unique<SchedulerService>(scheduler_options, &NullMetrics());
    int scheduler_port = 0;
    scheduler_server_ = Serve(scheduler_.get(), *security, &scheduler_port);
    if (!scheduler_server_) return Status::Error("cannot start the scheduler's gRPC server");
    const std::string scheduler_address = Loopback(scheduler_port);
    ShardOptions shard_options;
    shard_options.num_workers = workers;
    shard_options.optimizer.learning_rate = 0.01f;
    for (int i = 0; i < servers; ++i) {
      std::string error;
      shards_.push_back(std::make_unique<Shard>(
          shard_options, MakeOptimizer(shard_options.optimizer, &error), &NullMetrics()));
      services_.push_back(std::make_unique<ParameterServerService>(
          shards_.back().get(), JobToken::Fixed(kToken), nullptr));
      int port = 0;
      shard_servers_.push_back(Serve(services_.back().get(), *security, &port));
      if (!shard_servers_.back()) return Status::Error("cannot start a shard's gRPC server");
      SchedulerClientOptions options;  // registers as kubeps-server does
      options.scheduler_address = scheduler_address;
      options.node_id = "server-" + std::to_string(i);
      options.role = NodeRole::kServer;
      options.token = JobToken::Fixed(kToken);
      options.security = security;
      options.address = Loopback(port);
      SchedulerClient membership(options);
      int rank = -1;
      if (Status s = membership.Register(&rank); !s.ok()) return s;
    }
    if (Status s = MetricsServer::Start("", -1, {}, &client_metrics_); !s.ok()) return s;
    slots_.resize(workers);
    steps_.assign(sizes.size(), 0);
    std::vector<Status> started(workers, Status::Ok());
    TimeConcurrently(workers, [&](int w) {  // Start returns once every worker registered
      Slot& slot = slots_[w];
      KVOptions options;
      options.scheduler_address = scheduler_address;
      options.node_id = "worker-" + std::to_string(w);
      options.token = kToken;
      if (tls != nullptr) options.tls_dir = tls->workers();
      options.shared_memory = shared_memory;
      options.metrics = client_metrics_.get();
      options.peer_wait_limit_ms = 60000;
      started[w] = KVWorker::Start(options, &slot.kv);
      if (!started[w].ok()) return;
      std::vector<const float*> initial;
      for (uint64_t size : sizes) {
        slot.grads.emplace_back(size, 1e-3f);
        slot.values.emplace_back(size, 0.0f);
        initial.push_back(slot.grads.back().data());
      }
      started[w] = slot.kv->InitTensors(initial, sizes);
    });
    for (const Status& s : started)
      if (!s.ok()) return s;
    return Status::Ok();
  }

  ~Job() {
    for (Slot& slot : slots_)
      if (slot.kv) (void)slot.kv->Finish();
    slots_.clear();  // the clients go before the servers
    const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(250);
    for (auto& shard : shards_) shard->Stop();
    for (auto& server : shard_servers_)
      if (server) server->Shutdown(deadline);
    if (scheduler_) scheduler_->scheduler().Stop();
    if (scheduler_server_) scheduler_server_->Shutdown(deadline);
  }

  // `iterations` operations on tensor `key` by every worker at once.
  Status Run(Op op, uint32_t key, int iterations, double* seconds) {
    const int workers = static_cast<int>(slots_.size());
    std::vector<Status> result(workers, Status::Ok());
    Rendezvous in_step(workers);
    *seconds = TimeConcurrently(workers, [&](int w) {
      KVWorker& kv = *slots_[w].kv;
      std::vector<const float*> grads(slots_[w].grads.size(), nullptr);
      std::vector<float*> values(grads.size(), nullptr);
      grads[key] = slots_[w].grads[key].data();
      values[key] = slots_[w].values[key].data();
      for (int i = 0; i < iterations; ++i) {
        const uint64_t step = steps_[key] + (op == Op::kPull ? 0 : i);
        if (result[w].ok()) {
          result[w] = kv.Wait(op == Op::kPush   ? kv.Push(grads, step)
                              : op == Op::kPull ? kv.Pull(values, step)
                                                : kv.PushPull(grads, values, step));
        }
        if (op == Op::kPush) in_step.ArriveAndWait();  // a failed worker too: no one waits forever
      }
    });
    if (op != Op::kPull) steps_[key] += iterations;
    for (const Status& s : result)
      if (!s.ok()) return s;
    return Status::Ok();
  }

  // Requests sent again after a timeout: each one distorts the figures.
  double Resends() const { return Sum("kubeps_rpc_resends_total"); }
  // The share of the tensor bytes that went through shared memory.
  double SharedShare() const {
    const double moved =
        Sum("kubeps_worker_push_bytes_total") + Sum("kubeps_worker_pull_bytes_total");
    return moved > 0 ? Sum("kubeps_worker_shared_memory_bytes_total") / moved : 0;
  }

 private:
  double Sum(const std::string& counter) const {
    double total = 0;
    for (const auto& family : client_metrics_->registry().Collect()) {
      if (family.name != counter) continue;
      for (const auto& metric : family.metric) total += metric.counter.value;
    }
    return total;
  }

  struct Slot {
    std::unique_ptr<KVWorker> kv;
    std::vector<std::vector<float>> grads, values;  // by key
  };
  std::unique_ptr<SchedulerService> scheduler_;
  std::unique_ptr<grpc::Server> scheduler_server_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterServerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> shard_servers_;
  std::unique_ptr<MetricsServer> client_metrics_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> steps_;  // by key: the version every part of it is at
};

// Sends, or receives, exactly n bytes; false if the connection broke.
bool Transfer(bool sending, int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t done = sending ? send(fd, data, n, MSG_NOSIGNAL) : recv(fd, data, n, 0);
    if (done <= 0) return false;
    data += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}

// Plain TCP over 127.0.0.1: per worker one connection and two buffers of the
// largest tensor's bytes, one both ends send from, one both receive into
// (never at once: each end receives only after the other's last receive).
class TcpBaseline {
 public:
  Status Open(int workers, size_t max_bytes) {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    bool ok = listener >= 0 &&
              bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
              listen(listener, workers) == 0 &&
              getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
    links_.resize(ok ? workers : 0);
    for (Link& link : links_) {
      link.client = socket(AF_INET, SOCK_STREAM, 0);
      ok = ok && connect(link.client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
           (link.server = accept(listener, nullptr, nullptr)) >= 0;
      link.out.assign(max_bytes, 1);
      link.in.assign(max_bytes, 0);
    }
    if (listener >= 0) close(listener);
    return ok ? Status::Ok() : Status::Error("cannot connect over 127.0.0.1 for the TCP baseline");
  }
  ~TcpBaseline() {
    for (Link& link : links_) {
      if (link.client >= 0) close(link.client);
      if (link.server >= 0) close(link.server);
    }
  }

  // `iterations` operations moving `bytes` per worker, every worker at once.
  Status Run(Op op, size_t bytes, int iterations, double* seconds) {
    const size_t up = op == Op::kPull ? 1 : bytes, down = op == Op::kPush ? 1 : bytes;
    const int workers = static_cast<int>(links_.size());
    std::vector<char> ok(2 * workers, 1);
    std::vector<std::thread> servers;
    for (int w = 0; w < workers; ++w) {
      servers.emplace_back([&, w] {
        Link& l = links_[w];
        for (int i = 0; i < iterations && ok[w]; ++i)
          ok[w] = Transfer(false, l.server, l.in.data(), up) &&
                  Transfer(true, l.server, l.out.data(), down);
      });
    }
    *seconds = TimeConcurrently(workers, [&](int w) {
      Link& l = links_[w];
      for (int i = 0; i < iterations && ok[workers + w]; ++i)
        ok[workers + w] = Transfer(true, l.client, l.out.data(), up) &&
                          Transfer(false, l.client, l.in.data(), down);
    });
    for (auto& t : servers) t.join();
    if (std::count(ok.begin(), ok.end(), 0) > 0)
      return Status::Error("TCP baseline: a call failed");
    return Status::Ok();
  }

 private:
  struct Link {
    int client = -1, server = -1;
    std::vector<char> out, in;
  };
  std::vector<Link> links_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// "10M", "500K", "4096" -> elements; 0 for anything else.
uint64_t Elements(std::string name) {
  const uint64_t scale = name.empty()         ? 1
                         : name.back() == 'M' ? 1000000
                         : name.back() == 'K' ? 1000
                                              : 1;
  if (scale > 1) name.pop_back();
  if (name.empty() || name.size() > 12 || name.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stoull(name) * scale;
}

// One row: after a warm-up, `reps` repetitions of each job and the TCP
// baseline taking turns; the median seconds of each.
Status MeasureRow(const std::vector<Job*>& jobs, TcpBaseline& tcp, Op op, uint32_t key,
                  size_t bytes, int iterations, int reps, std::vector<double>* job_seconds,
                  double* tcp_seconds) {
  std::vector<std::vector<double>> kubeps(jobs.size());
  std::vector<double> plain;
  for (int rep = -1; rep < reps; ++rep) {
    double t = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      double k = 0;
      if (Status s = jobs[j]->Run(op, key, iterations, &k); !s.ok()) return s;
      if (rep >= 0) kubeps[j].push_back(k);  // not the warm-up
    }
    if (Status s = tcp.Run(op, bytes, iterations, &t); !s.ok()) return s;
    if (rep >= 0) plain.push_back(t);
  }
  job_seconds->clear();
  for (const auto& seconds : kubeps) job_seconds->push_back(Median(seconds));
  *tcp_seconds = Median(plain);
  return Status::Ok();
}

// Issue 12's goal for a row, or "-" where none applies.
std::string Goal(Op op, uint64_t elements, double goodput, double ratio) {
  if (op != Op::kPushPull) return "-";
  if (elements == 10000000) return ratio >= 0.5 ? "PASS" : "BELOW";
  if (elements == 1000000) return goodput >= 1.0 ? "PASS" : "BELOW";
  return "-";
}

// The TLS rows: push+pull of each size by the same job with and without
// mutual TLS, taking turns, both over gRPC. Adds each job's resends to *resends.
Status MeasureTls(int servers, int workers, const std::vector<uint64_t>& sizes,
                  const std::vector<std::string>& size_names, double bytes_per_rep, int reps,
                  const TlsFolders& tls, double* resends) {
  const std::string setup = std::to_string(servers) + "x" + std::to_string(workers);
  Job plain, secure;
  if (Status s = plain.Start(servers, workers, sizes); !s.ok()) return s;
  if (Status s = secure.Start(servers, workers, sizes, &tls); !s.ok()) return s;
  for (uint32_t key = 0; key < sizes.size(); ++key) {
    const size_t bytes = sizes[key] * sizeof(float);
    const int iterations = std::max(2, static_cast<int>(bytes_per_rep / bytes + 0.5));
    std::vector<double> plain_seconds, tls_seconds;
    for (int rep = -1; rep < reps; ++rep) {
      double p = 0, t = 0;
      if (Status s = plain.Run(Op::kPushPull, key, iterations, &p); !s.ok()) return s;
      if (Status s = secure.Run(Op::kPushPull, key, iterations, &t); !s.ok()) return s;
      if (rep < 0) continue;  // the warm-up
      plain_seconds.push_back(p);
      tls_seconds.push_back(t);
    }
    const double payload = 2.0 * bytes * workers * iterations;
    const double p = Median(plain_seconds), t = Median(tls_seconds);
    std::printf("%-5s %5s %11.2f %11.2f %9.2f\n", setup.c_str(), size_names[key].c_str(),
                payload / p / 1e9, payload / t / 1e9, p / t);
    std::fflush(stdout);
  }
  *resends += plain.Resends() + secure.Resends();
  return Status::Ok();
}

int Fail(const std::string& what, const Status& status, int exit_code = 1) {
  std::fprintf(stderr, "kv_goodput: %s: %s\n", what.c_str(), status.message().c_str());
  return exit_code;
}

}  // namespace
}  // namespace kubeps

int main(int argc, char** argv) {
  using namespace kubeps;
  KeepFreedTensorMemory();       // as the shards and the agent do
  SkipMutexDeadlockDetection();  // and as they do, no lock-order graph on every gRPC lock
  CLI::App app{"kv_goodput: push/pull goodput of the KV path against loopback TCP"};
  int reps = 7;
  std::vector<std::string> size_names = {"1M", "10M"};
  bool quick = false;
  app.add_option("--reps", reps, "repetitions per row (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", size_names, "tensor sizes in float32 elements, e.g. 1M,10M,500K")
      ->delimiter(',');
  app.add_flag("--quick", quick, "3 short repetitions (unless --reps): a smoke run");
  std::vector<std::string> setup_names = {"1x1", "2x2"};
  app.add_option("--setups", setup_names, "servers x workers, of 1x1,2x2")
      ->delimiter(',')
      ->check(CLI::IsMember({"1x1", "2x2"}));
  std::vector<std::string> op_names = {"push", "pull", "push+pull"};
  app.add_option("--ops", op_names, "of push,pull,push+pull")
      ->delimiter(',')
      ->check(CLI::IsMember({"push", "pull", "push+pull"}));
  bool grpc_only = false;
  app.add_flag("--grpc-only", grpc_only,
               "only the jobs over gRPC and raw TCP: no shared memory, no TLS");
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
  std::vector<uint64_t> sizes;
  for (const std::string& name : size_names) {
    sizes.push_back(Elements(name));
    if (sizes.back() == 0)
      return Fail("--sizes", Status::Error("want 1M,10M,500K; got " + name), 2);
  }
  if (quick && app.count("--reps") == 0) reps = 3;
  const double bytes_per_rep = quick ? 32e6 : 256e6;  // per worker and direction, about

  std::printf("kv_goodput: sync mode, medians of %d repetitions, GB/s of payload\n", reps);
  std::printf("%-5s %5s %-9s | %-31s | %-31s | %9s %9s\n", "", "", "", "kubeps over gRPC (TCP)",
              "kubeps through shared memory", "raw TCP", "");
  std::printf("%-5s %5s %-9s | %6s %7s %5s %-10s | %6s %7s %5s %-10s | %9s %9s\n", "setup", "size",
              "op", "GB/s", "ms/op", "/TCP", "goal", "GB/s", "ms/op", "/TCP", "goal", "GB/s",
              "ms/op");
  double resends = 0, shared_share = 1;
  std::vector<std::pair<int, int>> setups;  // (servers, workers)
  for (const std::string& name : setup_names) setups.emplace_back(name[0] - '0', name[2] - '0');
  std::vector<Op> ops;
  for (Op op : {Op::kPush, Op::kPull, Op::kPushPull}) {
    if (std::count(op_names.begin(), op_names.end(), OpName(op)) > 0) ops.push_back(op);
  }
  for (const auto& [servers, workers] : setups) {
    const std::string setup = std::to_string(servers) + "x" + std::to_string(workers);
    Job over_grpc, shared;
    if (Status s = over_grpc.Start(servers, workers, sizes); !s.ok())
      return Fail("starting " + setup, s);
    std::vector<Job*> jobs = {&over_grpc};
    if (!grpc_only) {
      if (Status s = shared.Start(servers, workers, sizes, nullptr, true); !s.ok())
        return Fail("starting " + setup + " with shared memory", s);
      jobs.push_back(&shared);
    }
    TcpBaseline tcp;
    const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    if (Status s = tcp.Open(workers, largest * sizeof(float)); !s.ok()) return Fail("TCP", s);
    for (uint32_t key = 0; key < sizes.size(); ++key) {
      const size_t bytes = sizes[key] * sizeof(float);
      const int iterations = std::max(2, static_cast<int>(bytes_per_rep / bytes + 0.5));
      for (Op op : ops) {
        std::vector<double> k;
        double t = 0;
        if (Status s = MeasureRow(jobs, tcp, op, key, bytes, iterations, reps, &k, &t); !s.ok())
          return Fail(setup + " " + OpName(op) + " of " + size_names[key], s);
        const double payload =
            static_cast<double>(bytes) * workers * iterations * (op == Op::kPushPull ? 2 : 1);
        std::printf("%-5s %5s %-9s", setup.c_str(), size_names[key].c_str(), OpName(op));
        for (double seconds : k) {
          const double goodput = payload / seconds / 1e9, ratio = t / seconds;
          std::printf(" | %6.2f %7.2f %5.2f %-10s", goodput, 1e3 * seconds / iterations, ratio,
                      Goal(op, sizes[key], goodput, ratio).c_str());
        }
        if (grpc_only) std::printf(" | %-31s", "  (not run: --grpc-only)");
        std::printf(" | %9.2f %9.2f\n", payload / t / 1e9, 1e3 * t / iterations);
        std::fflush(stdout);
      }
    }
    resends += over_grpc.Resends();
    if (!grpc_only) {
      resends += shared.Resends();
      shared_share = std::min(shared_share, shared.SharedShare());
    }
  }
  std::printf("goals (issue 12), push+pull: 10M at least 50%% of raw TCP, 1M at least 1.0 GB/s\n");
  if (!grpc_only) {
    std::printf(
        "share of the shared-memory jobs' tensor bytes that went through shared memory: "
        "%.1f%%\n",
        100 * shared_share);
    TlsFolders tls;
    if (Status s = tls.Create(); !s.ok()) return Fail("the TLS certificates", s);
    std::printf("\nmutual TLS: push+pull, GB/s, medians of %d repetitions taken in turns\n", reps);
    std::printf("%-5s %5s %11s %11s %9s\n", "setup", "size", "without", "with TLS", "TLS/without");
    for (const auto& [servers, workers] : setups) {
      if (Status s =
              MeasureTls(servers, workers, sizes, size_names, bytes_per_rep, reps, tls, &resends);
          !s.ok())
        return Fail("TLS " + std::to_string(servers) + "x" + std::to_string(workers), s);
    }
  }
  std::printf("requests resent after a timeout: %.0f%s\n", resends,
              resends > 0 ? " (the figures include their waits)" : "");
  return 0;
}
