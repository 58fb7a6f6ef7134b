// The C++ SDK's sidecar client (KVWorker::Connect) against the agent's real
// sidecar server (worker-agent/sidecar/) over an in-memory KV client: the
// rendezvous and hello, the KVWorker calls as protocol requests, the copies
// through the shared-memory file and the zero-copy regions, every error as a
// Status with the agent's message, a rollback, a restarted process, finish.
#include "worker-agent/kv/sidecar_kv_worker.h"

#include <cstdlib>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>

#include "tests/unit/worker-agent/sidecar/sidecar_test_util.h"
#include "worker-agent/kv/kv_worker.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two tensors, as a trainer would declare them: 6 and 5 elements.
const std::vector<uint64_t> kSizes = {6, 5};
const std::vector<float> kW = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {10, 20, 30, 40, 50};

class SidecarKVWorkerTest : public sidecar::SidecarTest {
 protected:
  SidecarOptions Options(int timeout_ms = 10000) const {
    SidecarOptions options;
    options.socket_dir = dir_;
    options.connect_timeout_ms = timeout_ms;
    return options;
  }
  std::unique_ptr<KVWorker> Connected() {
    std::unique_ptr<KVWorker> kv;
    Status s = KVWorker::Connect(Options(), &kv);
    EXPECT_TRUE(s.ok()) << s.message();
    return kv;
  }
  // Connected, with the two tensors initialized to kW and kB.
  std::unique_ptr<KVWorker> Initialized() {
    std::unique_ptr<KVWorker> kv = Connected();
    if (!kv) return kv;
    Status s = kv->InitTensors({kW.data(), kB.data()}, kSizes);
    EXPECT_TRUE(s.ok()) << s.message();
    return kv;
  }
};

std::vector<float> Minus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

TEST_F(SidecarKVWorkerTest, ConnectSaysHelloAndLearnsTheWorker) {
  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->rank(), 0);
  EXPECT_EQ(kv->size(), 1);
  EXPECT_EQ(kv->num_servers(), 2);
  auto* sidecar = static_cast<SidecarKVWorker*>(kv.get());
  EXPECT_EQ(sidecar->mode(), "sync");
  EXPECT_EQ(sidecar->optimizer(), "sgd");
  EXPECT_EQ(sidecar->CheckpointInterval(), 50u);
  EXPECT_THAT(kv->parts(), IsEmpty());      // the agent places the parts
  EXPECT_EQ(kv->SharedValues(0), nullptr);  // nothing declared yet
}

TEST_F(SidecarKVWorkerTest, ConnectFindsTheDirectoryInTheEnvironment) {
  ::setenv("KUBEPS_SOCKET_DIR", dir_.c_str(), 1);
  std::unique_ptr<KVWorker> kv;
  Status s = KVWorker::Connect(SidecarOptions(), &kv);
  ::unsetenv("KUBEPS_SOCKET_DIR");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(kv->size(), 1);
}

TEST_F(SidecarKVWorkerTest, ConnectWithoutADirectoryIsAnError) {
  ::unsetenv("KUBEPS_SOCKET_DIR");
  std::unique_ptr<KVWorker> kv;
  Status s = KVWorker::Connect(SidecarOptions(), &kv);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("KUBEPS_SOCKET_DIR"));
  EXPECT_FALSE(kv);
}

TEST_F(SidecarKVWorkerTest, ConnectGivesUpOnADirectoryWithNoAgent) {
  const std::string empty = dir_ + "/elsewhere";
  std::filesystem::create_directory(empty);
  SidecarOptions options = Options(200);
  options.socket_dir = empty;
  std::unique_ptr<KVWorker> kv;
  Status s = KVWorker::Connect(options, &kv);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("no kubeps agent in " + empty));
  EXPECT_THAT(s.message(), HasSubstr("agent.json"));
  EXPECT_THAT(s.message(), HasSubstr("the directory is empty"));
}

TEST_F(SidecarKVWorkerTest, TheNonceOfAnotherAgentIsRefused) {
  // What a client reads from a directory mounted from another pod.
  std::ofstream(dir_ + "/agent.json")
      << R"({"protocol": 1, "nonce": "0123456789abcdef0123456789abcdef"})";
  std::unique_ptr<KVWorker> kv;
  Status s = KVWorker::Connect(Options(), &kv);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is another agent's"));
}

TEST_F(SidecarKVWorkerTest, ASecondProcessIsRefusedWhileOneHoldsTheAgent) {
  std::unique_ptr<KVWorker> first = Connected();
  ASSERT_TRUE(first);
  std::unique_ptr<KVWorker> second;
  Status s = KVWorker::Connect(Options(), &second);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("pid " + std::to_string(::getpid())));
}

TEST_F(SidecarKVWorkerTest, InitTensorsStoresTheInitialValuesAndPullBringsThemBack) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv_.store(), (std::vector<std::vector<float>>{kW, kB}));
  std::vector<float> w(6), b(5);
  uint64_t version = 99;
  Status s = kv->WaitWithVersion(kv->Pull({w.data(), b.data()}, 0), &version);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(w, kW);
  EXPECT_EQ(b, kB);
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(static_cast<SidecarKVWorker*>(kv.get())->start_step(), 0u);
}

TEST_F(SidecarKVWorkerTest, TheNewestCommonCheckpointIsTheAgents) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->NewestCommonCheckpoint(), -1);
  kv_.SetNewestCommonCheckpoint(150);
  EXPECT_EQ(kv->NewestCommonCheckpoint(), 150);
}

TEST_F(SidecarKVWorkerTest, PushPullCopiesTheGradientsInAndTheNewValuesOut) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  std::vector<float> gw = {1, 1, 1, 1, 1, 1}, gb = {5, 4, 3, 2, 1};
  std::vector<float> w(6), b(5);
  KVWorker::Ticket ticket = kv->PushPull({gw.data(), gb.data()}, {w.data(), b.data()}, 0);
  // The gradients were copied into the shared file: the buffers are free.
  std::fill(gw.begin(), gw.end(), 100.0f);
  uint64_t version = 0;
  Status s = kv->WaitWithVersion(ticket, &version);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(w, Minus(kW, {1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b, Minus(kB, {5, 4, 3, 2, 1}));
  EXPECT_EQ(version, 1u);  // the agent reports the version pulled
  ASSERT_EQ(kv_.pushes().size(), 1u);
  EXPECT_EQ(kv_.pushes()[0].step, 0u);
  EXPECT_EQ(kv_.pull_versions().back(), 1u);  // push_pull pulls step + 1
}

TEST_F(SidecarKVWorkerTest, NullPointersLeaveKeysOut) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  std::vector<float> gb = {1, 1, 1, 1, 1};
  ASSERT_TRUE(kv->Wait(kv->Push({nullptr, gb.data()}, 0)).ok());
  ASSERT_EQ(kv_.pushes().size(), 1u);
  EXPECT_EQ(kv_.pushes()[0].grads.count(0), 0u);
  EXPECT_EQ(kv_.pushes()[0].grads.at(1), gb);
  std::vector<float> w(6, -1);
  ASSERT_TRUE(kv->Wait(kv->Pull({w.data()}, 0)).ok());
  EXPECT_EQ(w, kW);
  // Nothing selected: nothing to do.
  EXPECT_TRUE(kv->Wait(kv->Pull({nullptr, nullptr}, 0)).ok());
}

TEST_F(SidecarKVWorkerTest, PushPullPullsAKeyWithNoGradientApart) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  std::vector<float> gw(6, 1.0f), w(6), b(5);
  ASSERT_TRUE(kv->Wait(kv->PushPull({gw.data(), nullptr}, {w.data(), b.data()}, 0)).ok());
  EXPECT_EQ(w, Minus(kW, gw));
  EXPECT_EQ(b, kB);
  ASSERT_EQ(kv_.pushes().size(), 1u);
  EXPECT_EQ(kv_.pushes()[0].grads.count(1), 0u);  // the stale grads region was not pushed
}

TEST_F(SidecarKVWorkerTest, TheSharedRegionsAreUsedWithoutCopies) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  float* gw = kv->SharedGrads(0);
  float* w = kv->SharedValues(0);
  ASSERT_NE(gw, nullptr);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(kv->SharedGrads(2), nullptr);
  for (int i = 0; i < 6; ++i) gw[i] = 0.5f;
  ASSERT_TRUE(kv->Wait(kv->PushPull({gw}, {w}, 0)).ok());
  EXPECT_EQ(std::vector<float>(w, w + 6), Minus(kW, std::vector<float>(6, 0.5f)));
  EXPECT_EQ(kv_.pushes()[0].grads.at(0), std::vector<float>(6, 0.5f));
}

TEST_F(SidecarKVWorkerTest, MisuseFailsTheTicketWithAClearStatus) {
  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  std::vector<float> g(6, 1.0f);
  Status s = kv->Wait(kv->Push({g.data()}, 0));
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(s.message(), "push before InitTensors");

  ASSERT_TRUE(kv->InitTensors({kW.data(), kB.data()}, kSizes).ok());
  s = kv->Wait(kv->Push({g.data(), g.data(), g.data()}, 0));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("3 pointers for 2 declared tensors"));

  s = kv->Wait(12345);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("ticket 12345"));

  s = kv->InitTensors({kW.data(), kB.data()}, kSizes);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("called twice"));
}

TEST_F(SidecarKVWorkerTest, ARegionServesOneTicketAtATime) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  std::vector<float> g(6, 1.0f), other(6, 2.0f);
  KVWorker::Ticket first = kv->Push({g.data()}, 0);
  Status s = kv->Wait(kv->Push({other.data()}, 0));
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("grads region of tensor-0 is in use by ticket " +
                                     std::to_string(first) + ": Wait for it first"));
  ASSERT_TRUE(kv->Wait(first).ok());
  EXPECT_EQ(kv_.pushes().at(0).grads.at(0), g);  // not overwritten by the refused push
  EXPECT_TRUE(kv->Wait(kv->Push({other.data()}, 1)).ok());
}

TEST_F(SidecarKVWorkerTest, TicketsFromSeveralThreads) {
  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  const int kThreads = 4;
  std::vector<uint64_t> sizes(kThreads, 3);
  ASSERT_TRUE(kv->InitTensors({}, sizes).ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<const float*> grads(kThreads, nullptr);
      std::vector<float*> values(kThreads, nullptr);
      std::vector<float> g(3, 1.0f), v(3);
      grads[t] = g.data();
      values[t] = v.data();
      for (int step = 0; step < 20 && results[t].ok(); ++step) {
        results[t] = kv->Wait(kv->PushPull(grads, values, step));
        if (results[t].ok() && v[0] != -(step + 1.0f)) results[t] = Status::Error("wrong value");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(SidecarKVWorkerTest, AnAbortedWaitCarriesTheStepToResumeFrom) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  uint64_t resume = 99;
  ASSERT_TRUE(kv->Recover(&resume).ok());  // no rollback: where the session started
  EXPECT_EQ(resume, 0u);

  std::vector<float> g(6, 1.0f), w(6);
  kv_.RollBack(3, {std::vector<float>(6, 7.0f), std::vector<float>(5, 8.0f)});
  Status s = kv->Wait(kv->PushPull({g.data()}, {w.data()}, 4));
  EXPECT_TRUE(s.IsAborted()) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("the parameters of step 3 are in the values regions"));
  ASSERT_TRUE(kv->Recover(&resume).ok());
  EXPECT_EQ(resume, 3u);
  EXPECT_EQ(std::vector<float>(kv->SharedValues(1), kv->SharedValues(1) + 5),
            std::vector<float>(5, 8.0f));
  // The job goes on from step 3.
  ASSERT_TRUE(kv->Wait(kv->Pull({w.data()}, 3)).ok());
  EXPECT_EQ(w, std::vector<float>(6, 7.0f));
}

TEST_F(SidecarKVWorkerTest, ARestartedProcessKeepsTheServersValues) {
  {
    std::unique_ptr<KVWorker> kv = Initialized();
    ASSERT_TRUE(kv);
    std::vector<float> g(6, 1.0f);
    ASSERT_TRUE(kv->Wait(kv->Push({g.data()}, 0)).ok());
  }  // the process ends: bye
  EXPECT_TRUE(Eventually([&] { return sidecar::FilesIn(dir_, "tensors-").empty(); }));

  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  Status s = kv->InitTensors({}, {6, 4});
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("has 4 elements, but 5 before"));
  kv.reset();

  kv = Connected();
  ASSERT_TRUE(kv);
  uint64_t start = 99;
  ASSERT_TRUE(kv->Recover(&start).ok());  // before init, the session cannot know
  EXPECT_EQ(start, 0u);
  std::vector<float> fresh(6, 0.0f);
  ASSERT_TRUE(kv->InitTensors({fresh.data(), nullptr}, kSizes).ok());
  ASSERT_TRUE(kv->Recover(&start).ok());  // what a RemoteStore behind the agent starts from
  EXPECT_EQ(start, 1u);
  std::vector<float> w(6);
  uint64_t version = 0;
  ASSERT_TRUE(kv->WaitWithVersion(kv->Pull({w.data()}, 0), &version).ok());
  EXPECT_EQ(w, Minus(kW, std::vector<float>(6, 1.0f)));  // the servers', not `fresh`
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(static_cast<SidecarKVWorker*>(kv.get())->start_step(), 1u);
}

// With the servers' optimizer none, a C++ program resumed past step 0 says
// that it puts its own state of that step back, or is refused.
TEST_F(SidecarKVWorkerTest, AResumeWithServersThatOnlyAverageNeedsTheProgramsOwnState) {
  StopServer();
  StartServer("none");
  kv_.SetVersion(40);
  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  Status s = kv->InitTensors({kW.data(), kB.data()}, kSizes);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("starts at step 40, but the servers' optimizer is none"));
  kv.reset();

  SidecarOptions options = Options();
  options.restores_own_state = true;
  ASSERT_TRUE(Eventually([&] { return KVWorker::Connect(options, &kv).ok(); }));
  ASSERT_TRUE(kv->InitTensors({kW.data(), kB.data()}, kSizes).ok());
  EXPECT_EQ(static_cast<SidecarKVWorker*>(kv.get())->start_step(), 40u);
  kv.reset();

  // It holds its own state of steps 0 and 20 only: the job goes back to 20.
  options.own_state_steps = std::vector<uint64_t>{0, 20};
  ASSERT_TRUE(Eventually([&] { return KVWorker::Connect(options, &kv).ok(); }));
  ASSERT_TRUE(kv->InitTensors({kW.data(), kB.data()}, kSizes).ok());
  EXPECT_EQ(static_cast<SidecarKVWorker*>(kv.get())->start_step(), 20u);
  ASSERT_EQ(kv_.held_state_requests().size(), 1u);
  EXPECT_EQ(kv_.held_state_requests()[0].first, 40u);
}

// A program whose own checkpoints are kept by rank says which it holds
// once connected, when it knows its rank.
TEST_F(SidecarKVWorkerTest, TheOwnStatesStepsMayBeSaidOnceTheRankIsKnown) {
  StopServer();
  StartServer("none");
  kv_.SetVersion(40);
  std::unique_ptr<KVWorker> kv = Connected();
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->ServersOptimizer(), "none");
  EXPECT_EQ(kv->rank(), 0);
  ASSERT_TRUE(kv->HoldsOwnState({0, 20}).ok());
  ASSERT_TRUE(kv->InitTensors({kW.data(), kB.data()}, kSizes).ok());
  EXPECT_EQ(static_cast<SidecarKVWorker*>(kv.get())->start_step(), 20u);
  ASSERT_EQ(kv_.held_state_requests().size(), 1u);
  EXPECT_EQ(kv_.held_state_requests()[0].first, 40u);
  // The agent chose the start at init: later, it is too late to say.
  Status late = kv->HoldsOwnState({0, 20, 40});
  EXPECT_EQ(late.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("after InitTensors"));
}

TEST_F(SidecarKVWorkerTest, BarrierAndFinishReachTheKVClient) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  ASSERT_TRUE(kv->Barrier("epoch-1").ok());
  EXPECT_EQ(kv_.barriers(), std::vector<std::string>{"sidecar/epoch-1"});
  ASSERT_TRUE(kv->Finish().ok());
  EXPECT_EQ(kv_.finish_calls(), 1);
  std::vector<float> g(6, 1.0f);
  Status s = kv->Wait(kv->Push({g.data()}, 0));
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(s.message(), "push after finish");
  kv.reset();  // the session ends; the agent is done serving
  EXPECT_EQ(serving_.wait_for(10s), std::future_status::ready);
}

TEST_F(SidecarKVWorkerTest, MembershipIsTheAgentsAnswer) {
  StopServer();
  StartServer("sgd", true, /*elastic=*/true);
  kv_.SetSchedule(sidecar::TakenInAt(30, 2, 3));
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  StepMembership share;
  ASSERT_TRUE(kv->Membership(10, &share).ok());
  EXPECT_FALSE(share.member);
  EXPECT_EQ(share.next_member_step, std::optional<uint64_t>(30));
  ASSERT_TRUE(kv->Membership(30, &share).ok());
  EXPECT_TRUE(share.member);
  EXPECT_EQ(share.position, 2);
  EXPECT_EQ(share.count, 3);
  EXPECT_EQ(share.first_example, 85u);
  EXPECT_EQ(share.end_example, 128u);
  EXPECT_EQ(share.global_batch, 128u);
  EXPECT_FALSE(share.next_member_step);
}

TEST_F(SidecarKVWorkerTest, AGoneAgentIsUnavailable) {
  std::unique_ptr<KVWorker> kv = Initialized();
  ASSERT_TRUE(kv);
  StopServer();
  std::vector<float> w(6);
  Status s = kv->Wait(kv->Pull({w.data()}, 0));
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/agent.sock"));
}

}  // namespace
}  // namespace kubeps
