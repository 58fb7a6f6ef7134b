// The agent's serving mode end to end over a fake KV client: a session from
// hello to bye with the tensors in the mapped file, replies out of order,
// one session at a time (a second client is refused with the holder's pid;
// a client killed while holding its buffers frees them), a sync rollback,
// finish, a restarted training process, agent.json.
#include "worker-agent/sidecar/sidecar_server.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/worker-agent/sidecar/sidecar_test_util.h"

namespace kubeps::sidecar {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Frame(const json& message) {
  const std::string body = message.dump();
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>(body.size() >> (8 * i));
  return frame + body;
}

// Reads one frame's body into `body` (NUL-terminated) with system calls
// only; false on a short read or one that does not fit.
bool RawReadFrame(int fd, char* body, size_t capacity) {
  unsigned char prefix[4];
  size_t done = 0;
  while (done < 4) {
    ssize_t n = ::read(fd, prefix + done, 4 - done);
    if (n <= 0) return false;
    done += n;
  }
  const size_t length = prefix[0] | prefix[1] << 8 | prefix[2] << 16 | prefix[3] << 24;
  if (length + 1 > capacity) return false;
  for (done = 0; done < length;) {
    ssize_t n = ::read(fd, body + done, length - done);
    if (n <= 0) return false;
    done += n;
  }
  body[length] = '\0';
  return true;
}

// A training process in a child: it connects, says hello, optionally
// declares kTensors and maps the file (writing into it), tells the parent,
// and waits to be killed. After fork() the child makes system calls only:
// the parent has threads, so everything else is prepared before.
pid_t ForkHolder(const std::string& dir, const std::string& nonce, bool declare) {
  const std::string hello = Frame({{"op", "hello"}, {"id", 1}, {"protocol", 1}, {"nonce", nonce}});
  json tensors = json::array();
  for (const auto& [name, shape] : kTensors) tensors.push_back({{"name", name}, {"shape", shape}});
  const std::string declare_frame = Frame({{"op", "declare"}, {"id", 2}, {"tensors", tensors}});
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s/%s", dir.c_str(), kAgentSocketName);
  char file_path[512];
  std::snprintf(file_path, sizeof file_path, "%s/", dir.c_str());
  const size_t dir_length = std::strlen(file_path);
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    static char body[1 << 16];
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) ::_exit(2);
    if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) ::_exit(3);
    if (!RawReadFrame(fd, body, sizeof body) || !std::strstr(body, "\"ok\":true")) ::_exit(4);
    if (declare) {
      if (::write(fd, declare_frame.data(), declare_frame.size()) !=
          static_cast<ssize_t>(declare_frame.size()))
        ::_exit(5);
      if (!RawReadFrame(fd, body, sizeof body)) ::_exit(6);
      const char* file = std::strstr(body, "\"file\":\"");
      if (!file) ::_exit(7);
      file += 8;
      size_t n = 0;
      while (file[n] && file[n] != '"' && dir_length + n + 1 < sizeof file_path) {
        file_path[dir_length + n] = file[n];
        ++n;
      }
      file_path[dir_length + n] = '\0';
      const int shm = ::open(file_path, O_RDWR);
      if (shm < 0) ::_exit(8);
      void* base = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
      if (base == MAP_FAILED) ::_exit(9);
      static_cast<float*>(base)[0] = 1.0f;  // holding buffers, in use
    }
    if (::write(ready[1], "k", 1) != 1) ::_exit(10);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  pollfd wait_ready{ready[0], POLLIN, 0};
  char c = 0;
  const bool ok = ::poll(&wait_ready, 1, 10000) == 1 && ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (!ok) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ADD_FAILURE() << "the child client failed (exit " << WEXITSTATUS(status) << ")";
    return -1;
  }
  return pid;
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

class SidecarServerTest : public SidecarTest {};

TEST_F(SidecarServerTest, ASessionFromHelloToByeMovesTensorsThroughTheMappedFile) {
  auto client = Connect();
  ASSERT_TRUE(client->connected());
  json hello = client->Hello(nonce());
  ASSERT_TRUE(hello.value("ok", false)) << hello.dump();
  EXPECT_EQ(hello["rank"], 0);
  EXPECT_EQ(hello["size"], 1);
  EXPECT_EQ(hello["num_servers"], 2);
  EXPECT_EQ(hello["mode"], "sync");
  EXPECT_EQ(hello["optimizer"], "sgd");
  EXPECT_EQ(hello["checkpoint_interval"], 50);  // the steps a rollback may go back to

  json declared = client->Declare(kTensors, dir_);
  ASSERT_TRUE(declared.value("ok", false)) << declared.dump();
  const std::string file = dir_ + "/" + declared["file"].get<std::string>();
  EXPECT_EQ(std::filesystem::file_size(file), declared["bytes"].get<uint64_t>());
  ASSERT_EQ(declared["tensors"].size(), 2u);
  EXPECT_EQ(declared["tensors"][1]["name"], "b");
  EXPECT_EQ(declared["tensors"][1]["key"], 1);
  EXPECT_EQ(declared["tensors"][0]["numel"], 6);
  for (const json& t : declared["tensors"]) {
    EXPECT_EQ(t["values"].get<uint64_t>() % 64, 0u) << t.dump();
    EXPECT_EQ(t["grads"].get<uint64_t>() % 64, 0u) << t.dump();
  }

  // Initial values written before init are the ones stored.
  client->Fill(client->values(0), 0, {1, 2, 3, 4, 5, 6});
  client->Fill(client->values(1), 1, {10, 11, 12, 13, 14});
  json init = client->Call({{"op", "init"}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 0);
  EXPECT_THAT(kv_.store(),
              ElementsAre(ElementsAre(1, 2, 3, 4, 5, 6), ElementsAre(10, 11, 12, 13, 14)));

  // push_pull: gradients from the grads regions, parameters into values.
  client->Fill(client->grads(0), 0, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  client->Fill(client->grads(1), 1, {1, 1, 1, 1, 1});
  json started =
      client->Call({{"op", "push_pull"}, {"keys", {0, 1}}, {"step", 0}, {"numel", {6, 5}}});
  ASSERT_TRUE(started.value("ok", false)) << started.dump();
  json waited = client->Call({{"op", "wait"}, {"handles", {started["handle"]}}});
  ASSERT_TRUE(waited.value("ok", false)) << waited.dump();
  EXPECT_THAT(client->Values(0), ElementsAre(0.5, 1.5, 2.5, 3.5, 4.5, 5.5));
  EXPECT_THAT(client->Values(1), ElementsAre(9, 10, 11, 12, 13));
  ASSERT_EQ(kv_.pushes().size(), 1u);
  EXPECT_EQ(kv_.pushes()[0].step, 0u);
  EXPECT_THAT(kv_.pushes()[0].grads.at(1), ElementsAre(1, 1, 1, 1, 1));
  EXPECT_EQ(CounterValue("kubeps_worker_steps_total"), 1);

  // The async loop's shape: push one key, then pull it; the others stay.
  client->Fill(client->grads(1), 1, {2, 2, 2, 2, 2});
  json push = client->Call({{"op", "push"}, {"keys", {1}}, {"step", 1}, {"numel", {5}}});
  ASSERT_TRUE(push.value("ok", false)) << push.dump();
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {push["handle"]}}}).value("ok", false));
  json pull = client->Call({{"op", "pull"}, {"keys", {1}}, {"min_version", 2}});
  ASSERT_TRUE(pull.value("ok", false)) << pull.dump();
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {pull["handle"]}}}).value("ok", false));
  EXPECT_THAT(client->Values(1), ElementsAre(7, 8, 9, 10, 11));
  EXPECT_THAT(client->Values(0), ElementsAre(0.5, 1.5, 2.5, 3.5, 4.5, 5.5));
  EXPECT_EQ(kv_.pull_versions().back(), 2u);
  EXPECT_EQ(CounterValue("kubeps_worker_steps_total"), 2) << "a pull after a push ends a step";

  // bye is answered once the session's file is gone.
  json bye = client->Call({{"op", "bye"}});
  EXPECT_TRUE(bye.value("ok", false)) << bye.dump();
  EXPECT_FALSE(std::filesystem::exists(file)) << "bye answered before the file was deleted";
  EXPECT_TRUE(client->ReceiveAny().contains("closed"));
}

TEST_F(SidecarServerTest, AStepExchangedLayerByLayerCountsOnce) {
  // A program that overlaps its backward pass sends each layer's push_pull
  // as its gradients are ready: two per step here, one step each time.
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  for (int step = 0; step < 2; ++step) {
    for (int key : {1, 0}) {
      json started = client->Call(
          {{"op", "push_pull"}, {"keys", {key}}, {"step", step}, {"numel", {key == 0 ? 6 : 5}}});
      ASSERT_TRUE(started.value("ok", false)) << started.dump();
      ASSERT_TRUE(
          client->Call({{"op", "wait"}, {"handles", {started["handle"]}}}).value("ok", false));
    }
    EXPECT_EQ(CounterValue("kubeps_worker_steps_total"), step + 1);
  }
}

TEST_F(SidecarServerTest, AWaitBlocksWhileLaterRequestsAreAnswered) {
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  kv_.Hold();
  json started = client->Call({{"op", "push_pull"}, {"keys", {1}}, {"step", 0}, {"numel", {5}}});
  ASSERT_TRUE(started.value("ok", false)) << started.dump();
  const uint64_t wait_id = client->Send({{"op", "wait"}, {"handles", {started["handle"]}}});
  const uint64_t barrier_id = client->Send({{"op", "barrier"}, {"name", "b1"}});
  json first = client->ReceiveAny();
  EXPECT_EQ(first["id"], barrier_id)
      << "the barrier's reply waited for the wait's: " << first.dump();
  EXPECT_TRUE(client->ReceiveAny(200ms).contains("timeout")) << "the wait did not wait";
  kv_.Release();
  json waited = client->Receive(wait_id);
  EXPECT_TRUE(waited.value("ok", false)) << waited.dump();
}

TEST_F(SidecarServerTest, TheTimeTheProgramsWaitBlocksIsItsStepsExchangeWait) {
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  kv_.Hold();
  json started = client->Call({{"op", "push_pull"}, {"keys", {1}}, {"step", 0}, {"numel", {5}}});
  ASSERT_TRUE(started.value("ok", false)) << started.dump();
  const auto sent = std::chrono::steady_clock::now();
  const uint64_t wait_id = client->Send({{"op", "wait"}, {"handles", {started["handle"]}}});
  // From the moment the agent's wait blocks: the message takes a moment to
  // arrive, more on a loaded machine, and the agent's clock starts on arrival.
  kv_.AwaitBlockedWait();
  std::this_thread::sleep_for(300ms);
  kv_.Release();
  ASSERT_TRUE(client->Receive(wait_id).value("ok", false));
  const double blocked =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  const auto [waited, steps] = HistogramSumAndCount("kubeps_worker_exchange_wait_seconds");
  EXPECT_EQ(steps, 1u);
  EXPECT_GE(waited, 0.3);
  EXPECT_LE(waited, blocked);
  // The next step waits for nothing held: none of the first one's wait is in it.
  json next = client->Call({{"op", "push_pull"}, {"keys", {1}}, {"step", 1}, {"numel", {5}}});
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {next["handle"]}}}).value("ok", false));
  const auto [waited_after, steps_after] =
      HistogramSumAndCount("kubeps_worker_exchange_wait_seconds");
  EXPECT_EQ(steps_after, 2u);
  EXPECT_LT(waited_after - waited, 0.3);
}

TEST_F(SidecarServerTest, TheSessionEndsOnlyAfterItsDataStopsMoving) {
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  kv_.Hold();
  ASSERT_TRUE(client->Call({{"op", "pull"}}).value("ok", false));
  client->Close();  // never waited for: the KV client may still write the mapping
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(FilesIn(dir_, "tensors-").size(), 1u) << "unmapped under a pull in flight";
  kv_.Release();
  EXPECT_TRUE(Eventually([&] { return FilesIn(dir_, "tensors-").empty(); }));
  EXPECT_EQ(kv_.open_tickets(), 0u);
}

TEST_F(SidecarServerTest, ASecondClientIsRefusedNamingThePidThatHoldsTheAgent) {
  const pid_t holder = ForkHolder(dir_, nonce(), /*declare=*/false);
  ASSERT_GT(holder, 0);
  auto second = Connect();
  ASSERT_TRUE(second->connected());
  json refused = second->Hello(nonce());
  EXPECT_EQ(refused.value("code", ""), "FailedPrecondition") << refused.dump();
  EXPECT_THAT(refused.value("error", ""),
              AllOf(HasSubstr("pid " + std::to_string(holder) + " holds this agent"),
                    HasSubstr("one training process at a time")));
  EXPECT_TRUE(second->ReceiveAny().contains("closed"));
  KillAndReap(holder);
  // Once the holder is gone, the agent is free again.
  EXPECT_TRUE(Eventually([&] { return Connect()->Hello(nonce()).value("ok", false); }));
}

TEST_F(SidecarServerTest, AClientKilledHoldingItsBuffersFreesThemForTheNext) {
  const pid_t holder = ForkHolder(dir_, nonce(), /*declare=*/true);
  ASSERT_GT(holder, 0);
  const std::vector<std::string> files = FilesIn(dir_, "tensors-");
  ASSERT_EQ(files.size(), 1u);
  KillAndReap(holder);
  EXPECT_TRUE(Eventually([&] { return FilesIn(dir_, "tensors-").empty(); }))
      << files[0] << " outlived the client that died holding it";
  auto next = Connect();
  json init = next->Start(nonce(), dir_, kTensors);
  EXPECT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_THAT(FilesIn(dir_, "tensors-"), ::testing::Not(::testing::Contains(files[0])));
}

TEST_F(SidecarServerTest, ARollbackAbortsTheWaitWithTheResumeStepsParametersInPlace) {
  auto client = Connect();
  client->Hello(nonce());
  client->Declare(kTensors, dir_);
  client->Fill(client->values(0), 0, {1, 1, 1, 1, 1, 1});
  client->Fill(client->values(1), 1, {1, 1, 1, 1, 1});
  ASSERT_TRUE(client->Call({{"op", "init"}}).value("ok", false));
  auto step = [&](uint64_t s) {
    json started =
        client->Call({{"op", "push_pull"}, {"keys", {0, 1}}, {"step", s}, {"numel", {6, 5}}});
    EXPECT_TRUE(started.value("ok", false)) << started.dump();
    return client->Call({{"op", "wait"}, {"handles", {started["handle"]}}});
  };
  ASSERT_TRUE(step(0).value("ok", false));
  ASSERT_TRUE(step(1).value("ok", false));

  // A shard restarts from its checkpoint of step 1.
  kv_.RollBack(1, {std::vector<float>(6, 7.0f), std::vector<float>(5, 8.0f)});
  json aborted = step(2);
  EXPECT_EQ(aborted.value("code", ""), "Aborted") << aborted.dump();
  EXPECT_EQ(aborted.value("resume_step", 0), 1u) << aborted.dump();
  EXPECT_THAT(aborted.value("error", ""), HasSubstr("the parameters of step 1 are in the values"));
  EXPECT_THAT(client->Values(0), ::testing::Each(7.0f));
  EXPECT_THAT(client->Values(1), ::testing::Each(8.0f));
  EXPECT_EQ(kv_.recover_calls(), 1);
  EXPECT_EQ(kv_.pull_versions().back(), 1u) << "the resume step's parameters were not pulled";
  EXPECT_EQ(CounterValue("kubeps_worker_rollbacks_total"), 1);
  // The client goes on from the resume step.
  EXPECT_TRUE(step(1).value("ok", false));

  // Two requests of a rolled-back generation: one recovery for both.
  kv_.RollBack(2, {std::vector<float>(6, 3.0f), std::vector<float>(5, 4.0f)});
  json push = client->Call({{"op", "push"}, {"keys", {0}}, {"step", 2}, {"numel", {6}}});
  json pull = client->Call({{"op", "pull"}, {"keys", {1}}, {"min_version", 3}});
  json first = client->Call({{"op", "wait"}, {"handles", {push["handle"]}}});
  json second = client->Call({{"op", "wait"}, {"handles", {pull["handle"]}}});
  EXPECT_EQ(first.value("resume_step", 0), 2u) << first.dump();
  EXPECT_EQ(second.value("code", ""), "Aborted") << second.dump();
  EXPECT_EQ(second.value("resume_step", 0), 2u) << second.dump();
  EXPECT_EQ(kv_.recover_calls(), 2) << "recovered twice from one rollback";
}

TEST_F(SidecarServerTest, AfterASessionThatSaidFinishTheServerReturns) {
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  json finished = client->Call({{"op", "finish"}});
  EXPECT_TRUE(finished.value("ok", false)) << finished.dump();
  EXPECT_EQ(kv_.finish_calls(), 1);
  EXPECT_EQ(client->Call({{"op", "pull"}}).value("error", ""), "pull after finish");
  EXPECT_NE(serving_.wait_for(100ms), std::future_status::ready) << "returned before the bye";
  EXPECT_TRUE(client->Call({{"op", "bye"}}).value("ok", false));
  ASSERT_EQ(serving_.wait_for(5s), std::future_status::ready) << "Serve did not return";
  Status served = serving_.get();
  EXPECT_TRUE(served.ok()) << served.message();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/agent.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/agent.sock"));
  server_.reset();
}

TEST_F(SidecarServerTest, ARestartedProcessDeclaresTheSameTensorsAndResumesAtTheServersStep) {
  {
    auto first = Connect();
    ASSERT_TRUE(first->Start(nonce(), dir_, kTensors).value("ok", false));
    json started =
        first->Call({{"op", "push_pull"}, {"keys", {0, 1}}, {"step", 0}, {"numel", {6, 5}}});
    ASSERT_TRUE(first->Call({{"op", "wait"}, {"handles", {started["handle"]}}}).value("ok", false));
  }                   // the process ends without bye
  kv_.SetVersion(7);  // the other workers trained on
  auto restarted = Connect();
  ASSERT_TRUE(Eventually([&] {
    restarted = Connect();
    return restarted->Hello(nonce()).value("ok", false);
  }));
  json other = restarted->Declare({{"w", {3, 3}}, {"b", {5}}}, dir_);
  EXPECT_EQ(other.value("code", ""), "FailedPrecondition") << other.dump();
  EXPECT_THAT(other.value("error", ""),
              AllOf(HasSubstr("tensor \"w\" (key 0) has 9 elements, but 6 before"),
                    HasSubstr("must declare the same")));
  ASSERT_TRUE(restarted->Declare(kTensors, dir_).value("ok", false));
  json init = restarted->Call({{"op", "init"}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 7);
  EXPECT_THAT(kv_.pull_versions(), ::testing::Contains(7u))
      << "the values of exactly the resume step were not asked for";
  EXPECT_EQ(kv_.init_calls(), 2);
}

TEST_F(SidecarServerTest, AgentJsonNamesTheAgentAndTheSocketIsPrivate) {
  json agent = ReadJsonFile(dir_ + "/agent.json");
  EXPECT_EQ(agent["protocol"], 1);
  EXPECT_EQ(agent["job"], "mnist");
  EXPECT_EQ(agent["replica"], "worker-0");
  EXPECT_EQ(agent["pid"], ::getpid());
  EXPECT_EQ(agent["nonce"], nonce());
  EXPECT_THAT(agent["nonce"].get<std::string>(), ::testing::MatchesRegex("[0-9a-f]{32}"));
  struct stat info {};
  ASSERT_EQ(::stat((dir_ + "/agent.sock").c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  // A new agent in the same directory: the old one's leftovers are gone and
  // its nonce changes.
  const std::string old_nonce = nonce();
  StopServer();
  std::ofstream(dir_ + "/agent.json") << R"({"nonce": "stale"})";
  std::ofstream(dir_ + "/tensors-00000000deadbeef.shm") << "x";
  StartServer("none", /*sync=*/false);
  EXPECT_NE(ReadJsonFile(dir_ + "/agent.json")["nonce"], old_nonce);
  EXPECT_TRUE(FilesIn(dir_, "tensors-").empty());
  json hello = Connect()->Hello(nonce());
  EXPECT_EQ(hello["optimizer"], "none");
  EXPECT_EQ(hello["mode"], "async");
}

TEST_F(SidecarServerTest, ShutdownCutsTheSessionAndRemovesTheFiles) {
  auto client = Connect();
  ASSERT_TRUE(client->Start(nonce(), dir_, kTensors).value("ok", false));
  server_->Shutdown();
  ASSERT_EQ(serving_.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(client->ReceiveAny().contains("closed"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/agent.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/agent.sock"));
  server_.reset();
  EXPECT_TRUE(FilesIn(dir_, "tensors-").empty());
}

}  // namespace
}  // namespace kubeps::sidecar
