// A scheduler restarted mid-job (its pod evicted or drained) over the real
// protocol: the job's nodes, through the scheduler's one client
// (common/scheduler_client.h), bring the new scheduler what the old one
// knew, on the same address, as a Kubernetes Service gives it.
#include <chrono>
#include <future>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/scheduler_client.h"
#include "ps-server/scheduler_service.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;

// The job of every test here: one server, two workers.
SchedulerOptions OneServerTwoWorkers() {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  return options;
}

// The job's scheduler, started again on the same port when asked.
class RestartingScheduler {
 public:
  RestartingScheduler() { Start(); }
  ~RestartingScheduler() { Stop(); }

  void Start() {
    SchedulerOptions options = OneServerTwoWorkers();
    options.replace_silent_after_ms = 0;
    service_ = std::make_unique<SchedulerService>(options, &NullMetrics());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port_),
                             grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void Stop() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_.reset();
  }
  void Restart() {
    Stop();
    Start();
  }
  std::unique_ptr<SchedulerClient> Client(const std::string& node_id, NodeRole role) const {
    SchedulerClientOptions options;
    options.scheduler_address = "127.0.0.1:" + std::to_string(port_);
    options.node_id = node_id;
    options.role = role;
    if (role == NodeRole::kServer) options.address = node_id + ".local:9000";
    options.long_poll_ms = 100;
    options.peer_wait_limit_ms = 5000;
    return std::make_unique<SchedulerClient>(options);
  }

 private:
  int port_ = 0;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
};

// Each node's first registration, in order: their ranks.
std::vector<int> RegisterAll(std::initializer_list<SchedulerClient*> nodes) {
  std::vector<int> ranks;
  for (SchedulerClient* node : nodes) {
    int rank = -1;
    EXPECT_TRUE(node->Register(&rank).ok());
    ranks.push_back(rank);
  }
  return ranks;
}

// A beat, then the beat after a re-registration where the first found the
// scheduler restarted.
HeartbeatAnswer Beat(SchedulerClient& node) {
  HeartbeatAnswer answer;
  if (!node.Heartbeat(0, &answer).ok()) {
    EXPECT_TRUE(node.Heartbeat(0, &answer).ok());
  }
  return answer;
}

// Before, a worker that registered and then waited for the view while the
// scheduler restarted polled the new one, which did not know it, until its
// peer wait limit ran out; the new one waited for it as long.
TEST(SchedulerRestartTest, AWorkerWaitingForTheViewRegistersWithTheNewScheduler) {
  RestartingScheduler scheduler;
  auto worker0 = scheduler.Client("worker-0", NodeRole::kWorker);
  int rank = -1;
  ASSERT_TRUE(worker0->Register(&rank).ok());
  auto view = std::async(std::launch::async, [&] {
    ClusterInfo cluster;
    return worker0->AwaitClusterView(&cluster);
  });
  ASSERT_EQ(view.wait_for(300ms), std::future_status::timeout) << "the job is not complete";
  scheduler.Restart();
  auto server0 = scheduler.Client("server-0", NodeRole::kServer);
  auto worker1 = scheduler.Client("worker-1", NodeRole::kWorker);
  ASSERT_TRUE(server0->Register(&rank).ok());
  ASSERT_TRUE(worker1->Register(&rank).ok());
  ASSERT_EQ(view.wait_for(3s), std::future_status::ready) << "worker-0 still waits";
  const Status s = view.get();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Beat(*server0).generation, 0u) << "the job's first start, not a recovery";
}

// Nodes named without a rank (a job of its own launcher, not a StatefulSet's
// "-N" pods) keep the ranks they had whatever order they come back to a
// restarted scheduler in. Before, the first to come back took rank 0: two
// workers swapped ranks, and so their shares of the data and of the finish.
TEST(SchedulerRestartTest, NodesNamedWithoutARankKeepTheirRanksAfterARestart) {
  RestartingScheduler scheduler;
  auto server = scheduler.Client("ps", NodeRole::kServer);
  auto first = scheduler.Client("alpha", NodeRole::kWorker);
  auto second = scheduler.Client("beta", NodeRole::kWorker);
  const int second_rank = RegisterAll({server.get(), first.get(), second.get()})[2];
  ASSERT_EQ(second_rank, 1);
  scheduler.Restart();
  Beat(*second);  // beta comes back first
  Beat(*first);
  Beat(*server);
  const Status finished = second->Finish(second_rank);
  EXPECT_TRUE(finished.ok()) << finished.message();
}

// A rank taken since the restart (a new process of a node named without a
// rank registered first): the node that had it cannot go on under another,
// and its beat says so as a failure instead of training on another's share.
TEST(SchedulerRestartTest, ANodeWhoseRankWasTakenSinceTheRestartStops) {
  RestartingScheduler scheduler;
  auto server = scheduler.Client("ps", NodeRole::kServer);
  auto first = scheduler.Client("alpha", NodeRole::kWorker);
  ASSERT_EQ(RegisterAll({server.get(), first.get()})[1], 0);
  scheduler.Restart();
  auto newcomer = scheduler.Client("gamma", NodeRole::kWorker);
  ASSERT_EQ(RegisterAll({newcomer.get()})[0], 0);
  HeartbeatAnswer answer;
  const Status beat = first->Heartbeat(0, &answer);
  ASSERT_TRUE(beat.ok()) << beat.message();
  EXPECT_NE(answer.refused.find("alpha had rank 0 before the scheduler restarted, which gamma "
                                "holds now"),
            std::string::npos)
      << answer.refused;
  ASSERT_TRUE(first->Heartbeat(0, &answer).ok());
  EXPECT_FALSE(answer.refused.empty()) << "said again by every beat after, never registered";
}

// A node of an older build registering again says no rank: its id's suffix
// is the one it had, as before.
TEST(SchedulerRestartTest, ANodeRegisteringAgainWithoutARankTakesItsIdsSuffix) {
  Scheduler s(OneServerTwoWorkers(), &NullMetrics());
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("worker-1");
  request.mutable_node()->set_role(v1::WORKER);
  request.mutable_node()->set_incarnation(1);
  request.mutable_node()->set_registered_before(true);
  v1::RegisterResponse response;
  ASSERT_TRUE(s.Register(&request, &response).ok());
  EXPECT_EQ(response.rank(), 1);
}

// A worker that finishes before its first beat to a restarted scheduler:
// the new one does not know it, and it registers again and says it once
// more. Before, the scheduler's refusal came back as an unknown error, the
// retry never ran, and the worker's finish failed.
TEST(SchedulerRestartTest, AWorkerFinishingRightAfterARestartRegistersAgainFirst) {
  RestartingScheduler scheduler;
  auto server = scheduler.Client("server-0", NodeRole::kServer);
  auto worker0 = scheduler.Client("worker-0", NodeRole::kWorker);
  auto worker1 = scheduler.Client("worker-1", NodeRole::kWorker);
  const int rank0 = RegisterAll({server.get(), worker0.get(), worker1.get()})[1];
  scheduler.Restart();
  Beat(*server);
  const Status finished = worker0->Finish(rank0);
  EXPECT_TRUE(finished.ok()) << finished.message();
}

// A job of one server and two workers where worker 0 finished, and the
// server heard so, before the scheduler restarted.
class AfterWorker0FinishedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<int> ranks = RegisterAll({server0_.get(), worker0_.get(), worker1_.get()});
    rank1_ = ranks[2];
    ASSERT_TRUE(worker0_->Finish(ranks[1]).ok());
    EXPECT_FALSE(Beat(*server0_).shutdown);  // and it hears that worker 0 finished
    scheduler_.Restart();
  }

  RestartingScheduler scheduler_;
  std::unique_ptr<SchedulerClient> server0_ = scheduler_.Client("server-0", NodeRole::kServer);
  std::unique_ptr<SchedulerClient> worker0_ = scheduler_.Client("worker-0", NodeRole::kWorker);
  std::unique_ptr<SchedulerClient> worker1_ = scheduler_.Client("worker-1", NodeRole::kWorker);
  int rank1_ = -1;
};

// Before, a worker that finished before the scheduler restarted never
// registered with the new one (its process had ended), which then never
// saw the job complete: no end, no final checkpoint, no later recovery.
TEST_F(AfterWorker0FinishedTest, TheServersTellTheNewSchedulerWhichWorkersFinished) {
  EXPECT_FALSE(Beat(*server0_).shutdown);
  EXPECT_FALSE(Beat(*worker1_).shutdown);
  ASSERT_TRUE(worker1_->Finish(rank1_).ok());
  EXPECT_TRUE(Beat(*server0_).shutdown) << "every worker finished: the job is over";
}

// A new process in the rank of a worker the servers said had finished (its
// pod restarted) trains: the job is not over until it finishes too.
TEST_F(AfterWorker0FinishedTest, AFinishedWorkersNewProcessIsNotTakenForFinished) {
  Beat(*server0_);  // registers again, saying worker 0 finished
  auto worker0_again = scheduler_.Client("worker-0", NodeRole::kWorker);
  int rank0 = -1;
  ASSERT_TRUE(worker0_again->Register(&rank0).ok());
  Beat(*worker1_);
  ASSERT_TRUE(worker1_->Finish(rank1_).ok());
  EXPECT_FALSE(Beat(*server0_).shutdown) << "worker 0's new process has not finished";
}

}  // namespace
}  // namespace kubeps
