// The sidecar's request handlers (worker-agent/sidecar: a session's hello,
// declare, init, push, pull, push_pull, wait, barrier, finish, bye) on any
// byte stream a training process could write to the agent's socket: the
// input is read as the protocol's frames (framing.h) and every message is
// handled by a Session over an in-memory KV client, as the agent's server
// does; then the session is closed. A new session (and shared-memory file)
// for every input: a session's state is one connection's.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_target.h"
#include "tests/unit/worker-agent/sidecar/fake_kv_worker.h"
#include "worker-agent/kv/task_pool.h"
#include "worker-agent/sidecar/framing.h"
#include "worker-agent/sidecar/session.h"

namespace {

using nlohmann::json;

constexpr const char* kNonce = "fuzz-nonce";

std::string SocketDir() {
  static const std::string dir = [] {
    std::string path = std::filesystem::temp_directory_path() /
                       ("kubeps-fuzz-sidecar-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

std::string Frame(const json& message) {
  const std::string body = message.dump();
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return frame + body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kubeps::TaskPool pool(2);
  int fds[2];
  FuzzCheck(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
  // The whole input fits the socket's buffer (inputs are a few KiB).
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fds[1], data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  ::close(fds[1]);

  kubeps::sidecar::FakeKVWorker kv;
  std::vector<uint64_t> known_numels;
  kubeps::sidecar::SessionContext context;
  context.kv = &kv;
  context.pool = &pool;
  context.socket_dir = SocketDir();
  context.nonce = kNonce;
  context.known_numels = &known_numels;
  {
    // As a client does, each request's reply is awaited before the next is
    // sent (init, wait, barrier and finish answer from the pool), so that an
    // input reaches past init. FUZZ_VERBOSE=1 prints the replies.
    static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
    std::mutex mutex;
    std::condition_variable replied;
    size_t replies = 0;
    kubeps::sidecar::Session session(context, [&](const json& reply) {
      if (verbose) std::fprintf(stderr, "%s\n", reply.dump().c_str());
      std::lock_guard<std::mutex> lock(mutex);
      ++replies;
      replied.notify_all();
    });
    json message;
    std::string error;
    for (size_t requests = 1; kubeps::sidecar::ReadFrame(fds[0], &message, &error) ==
                              kubeps::sidecar::FrameRead::kMessage;
         ++requests) {
      if (session.Handle(message) == kubeps::sidecar::Session::Next::kBye) break;
      std::unique_lock<std::mutex> lock(mutex);
      replied.wait_for(lock, std::chrono::seconds(1), [&] { return replies >= requests; });
    }
    session.Close();
  }
  ::close(fds[0]);
  return 0;
}

// A training process's whole session: hello, declare two tensors, init, a
// step's push_pull and wait, a barrier, finish, bye; and a frame that is not
// JSON.
std::vector<std::string> FuzzSeeds() {
  const std::vector<json> session = {
      {{"op", "hello"}, {"id", 1}, {"protocol", 1}, {"nonce", kNonce}, {"pid", 42}},
      {{"op", "declare"},
       {"id", 2},
       {"tensors", {{{"name", "w"}, {"shape", {2, 3}}}, {{"name", "b"}, {"shape", {5}}}}}},
      {{"op", "init"}, {"id", 3}},
      {{"op", "push_pull"}, {"id", 4}, {"keys", {0, 1}}, {"step", 0}, {"numel", {6, 5}}},
      {{"op", "wait"}, {"id", 5}, {"handles", {1}}},
      {{"op", "pull"}, {"id", 6}, {"keys", {1}}},
      {{"op", "barrier"}, {"id", 7}, {"name", "epoch"}},
      {{"op", "finish"}, {"id", 8}},
      {{"op", "bye"}, {"id", 9}}};
  std::string whole;
  std::vector<std::string> seeds;
  for (const json& message : session) {
    whole += Frame(message);
    seeds.push_back(Frame(message));
  }
  seeds.push_back(whole);
  seeds.push_back(std::string("\x05\0\0\0", 4) + "{nope");
  return seeds;
}
