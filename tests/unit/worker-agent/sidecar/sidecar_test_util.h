// What the sidecar's tests share: a client of the protocol in a few lines,
// as a training process's would be (socket, framing, the mapped file), and
// a fixture that runs a real SidecarServer over a FakeKVWorker in a fresh
// directory.
#ifndef KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_SIDECAR_TEST_UTIL_H_
#define KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_SIDECAR_TEST_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/step_membership.h"
#include "tests/unit/worker-agent/sidecar/fake_kv_worker.h"
#include "worker-agent/sidecar/framing.h"
#include "worker-agent/sidecar/sidecar_server.h"

namespace kubeps::sidecar {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Connects to <dir>/agent.sock; -1 when nothing answers there.
inline int ConnectTo(const std::string& dir) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = dir + "/" + kAgentSocketName;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Files of the directory whose names start with `prefix`.
inline std::vector<std::string> FilesIn(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

// One session's client. Replies may come out of order: those of other ids
// wait in a queue until asked for. Not thread-safe.
class TestClient {
 public:
  explicit TestClient(int fd) : fd_(fd) {}
  ~TestClient() {
    Unmap();
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  uint64_t Send(json request) {
    const uint64_t id = next_id_++;
    request["id"] = id;
    EXPECT_TRUE(WriteFrame(fd_, request).ok()) << request.dump();
    return id;
  }
  // The reply to `id` (or one that could not name its request: id null),
  // {"timeout": true} after `limit`.
  json Receive(uint64_t id, std::chrono::milliseconds limit = 10s) {
    for (;;) {
      for (auto it = queued_.begin(); it != queued_.end(); ++it) {
        if (it->value("id", json()) == json(id) || (*it)["id"].is_null()) {
          json reply = *it;
          queued_.erase(it);
          return reply;
        }
      }
      json reply = ReceiveAny(limit);
      if (reply.contains("timeout") || reply.contains("closed")) return reply;
      queued_.push_back(reply);
    }
  }
  // The next frame from the agent: {"closed": ...} at the end of the stream.
  json ReceiveAny(std::chrono::milliseconds limit = 10s) {
    pollfd ready{fd_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(limit.count())) != 1) return {{"timeout", true}};
    json reply;
    std::string error;
    if (ReadFrame(fd_, &reply, &error) != FrameRead::kMessage) return {{"closed", error}};
    return reply;
  }
  json Call(json request) { return Receive(Send(std::move(request))); }

  json Hello(const std::string& nonce) {
    return Call({{"op", "hello"}, {"protocol", 1}, {"nonce", nonce}, {"pid", ::getpid()}});
  }
  // Declares tensors of the given names and shapes and maps the file.
  json Declare(const std::vector<std::pair<std::string, std::vector<int>>>& tensors,
               const std::string& dir) {
    json list = json::array();
    for (const auto& [name, shape] : tensors)
      list.push_back({{"name", name}, {"shape", shape}, {"dtype", "float32"}});
    json reply = Call({{"op", "declare"}, {"tensors", list}});
    if (reply.value("ok", false)) Map(dir + "/" + reply["file"].get<std::string>(), reply);
    return reply;
  }
  // hello, declare, init: a session ready for data.
  json Start(const std::string& nonce, const std::string& dir,
             const std::vector<std::pair<std::string, std::vector<int>>>& tensors) {
    json hello = Hello(nonce);
    EXPECT_TRUE(hello.value("ok", false)) << hello.dump();
    json declared = Declare(tensors, dir);
    EXPECT_TRUE(declared.value("ok", false)) << declared.dump();
    return Call({{"op", "init"}});
  }

  float* values(size_t key) { return At(layout_.at(key)["values"]); }
  float* grads(size_t key) { return At(layout_.at(key)["grads"]); }
  uint64_t numel(size_t key) const { return layout_.at(key)["numel"]; }
  std::vector<float> Values(size_t key) {
    return std::vector<float>(values(key), values(key) + numel(key));
  }
  void Fill(float* region, size_t key, std::vector<float> data) {
    ASSERT_EQ(data.size(), numel(key));
    std::copy(data.begin(), data.end(), region);
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void Map(const std::string& path, const json& declared) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "cannot open " << path;
    bytes_ = declared["bytes"];
    void* base = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(base, MAP_FAILED) << path;
    base_ = static_cast<char*>(base);
    layout_ = declared["tensors"];
  }
  void Unmap() {
    if (base_) ::munmap(base_, bytes_);
    base_ = nullptr;
  }
  float* At(const json& offset) { return reinterpret_cast<float*>(base_ + offset.get<uint64_t>()); }

  int fd_;
  uint64_t next_id_ = 1;
  std::deque<json> queued_;
  char* base_ = nullptr;
  uint64_t bytes_ = 0;
  json layout_;
};

// A real server over a fake KV client, serving in a thread, in a fresh
// directory.
class SidecarTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(); }
  void TearDown() override {
    StopServer();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(const std::string& optimizer = "sgd", bool sync = true, bool elastic = false) {
    if (dir_.empty()) {
      char pattern[] = "/tmp/kubeps-sidecar-XXXXXX";
      ASSERT_NE(::mkdtemp(pattern), nullptr);
      dir_ = pattern;
    }
    ASSERT_TRUE(MetricsServer::Start("", -1, {}, &metrics_).ok());
    SidecarOptions options;
    options.socket_dir = dir_;
    options.job_name = "mnist";
    options.replica = "worker-0";
    options.sync = sync;
    options.optimizer = optimizer;
    options.elastic = elastic;
    options.batch_size = 64;
    options.checkpoint_interval = 50;
    options.metrics = metrics_.get();
    options.progress_interval_ms = 100000;
    Status started = SidecarServer::Start(options, &kv_, &server_);
    ASSERT_TRUE(started.ok()) << started.message();
    serving_ = std::async(std::launch::async, [this] { return server_->Serve(); });
  }
  void StopServer() {
    if (!server_) return;
    server_->Shutdown();
    EXPECT_EQ(serving_.wait_for(10s), std::future_status::ready) << "Serve did not return";
    server_.reset();
  }

  std::unique_ptr<TestClient> Connect() { return std::make_unique<TestClient>(ConnectTo(dir_)); }
  // A session past init, with kTensors declared.
  std::unique_ptr<TestClient> Ready();
  std::string nonce() const { return server_->nonce(); }
  // Until `condition` holds, at most `limit`.
  static bool Eventually(const std::function<bool()>& condition,
                         std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  // The value of a counter of the server's metrics (0 when absent).
  double CounterValue(const std::string& name) {
    for (const auto& family : metrics_->registry().Collect()) {
      if (family.name != name) continue;
      double sum = 0;
      for (const auto& metric : family.metric) sum += metric.counter.value;
      return sum;
    }
    return 0;
  }

  // The sum and count of a histogram of the server's metrics (0 when absent).
  std::pair<double, uint64_t> HistogramSumAndCount(const std::string& name) {
    for (const auto& family : metrics_->registry().Collect()) {
      if (family.name != name) continue;
      double sum = 0;
      uint64_t count = 0;
      for (const auto& metric : family.metric) {
        sum += metric.histogram.sample_sum;
        count += metric.histogram.sample_count;
      }
      return {sum, count};
    }
    return {0, 0};
  }

  std::string dir_;
  FakeKVWorker kv_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<SidecarServer> server_;
  std::future<Status> serving_;
};

// Two tensors, as a test declares them: "w" of 2x3 and "b" of 5.
inline const std::vector<std::pair<std::string, std::vector<int>>> kTensors = {{"w", {2, 3}},
                                                                               {"b", {5}}};

inline std::unique_ptr<TestClient> SidecarTest::Ready() {
  auto client = Connect();
  EXPECT_TRUE(client->connected());
  json init = client->Start(nonce(), dir_, kTensors);
  EXPECT_TRUE(init.value("ok", false)) << init.dump();
  return client;
}

// An elastic job's schedule for a worker taken in at `first_step` as run
// `position` of `count` of a global batch of 128 (FakeKVWorker::SetSchedule).
inline std::function<StepMembership(uint64_t)> TakenInAt(uint64_t first_step, int position,
                                                         int count) {
  return [=](uint64_t step) {
    StepMembership out;
    out.global_batch = 128;
    if (step < first_step) {
      out.next_member_step = first_step;
      return out;
    }
    out.member = true;
    out.position = position;
    out.count = count;
    BatchRun(out.global_batch, position, count, &out.first_example, &out.end_example);
    return out;
  };
}

}  // namespace kubeps::sidecar

#endif  // KUBEPS_TESTS_UNIT_WORKER_AGENT_SIDECAR_SIDECAR_TEST_UTIL_H_
