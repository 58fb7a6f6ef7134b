// The job's scheduler (ps-server/scheduler.h): rank assignment, the cluster
// view long poll, barriers, liveness from heartbeats, the end-of-job flag,
// and the job token over a real gRPC server.
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/resend.h"
#include "common/termination_message.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/scheduler.h"
#include "ps-server/scheduler_service.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<Scheduler> MakeScheduler(int servers, int workers, int dead_after_ms = 5000,
                                         bool workers_keep_parameters = false) {
  SchedulerOptions options;
  options.workers_keep_parameters = workers_keep_parameters;
  options.num_servers = servers;
  options.num_workers = workers;
  options.dead_after_ms = dead_after_ms;
  // These tests restart nodes at once; the wait for a predecessor's silence
  // has tests of its own (hostile_client_test.cc).
  options.replace_silent_after_ms = 0;
  return std::make_unique<Scheduler>(options, &NullMetrics());
}

// The registration key each node got last, as the node keeps it.
std::map<std::string, std::string>& Keys() {
  static std::map<std::string, std::string> keys;
  return keys;
}

grpc::Status Register(Scheduler& s, const std::string& node_id, v1::Role role, int* rank = nullptr,
                      uint64_t incarnation = 1, const std::string& address = "",
                      v1::RegisterResponse* answer = nullptr) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id(node_id);
  request.mutable_node()->set_role(role);
  request.mutable_node()->set_incarnation(incarnation);
  request.mutable_node()->set_address(
      address.empty() && role == v1::SERVER ? node_id + ".local:9000" : address);
  v1::RegisterResponse response;
  grpc::Status status = s.Register(&request, &response);
  if (rank) *rank = status.ok() ? response.rank() : -1;
  if (status.ok()) Keys()[node_id] = response.registration_key();
  if (answer) *answer = response;
  return status;
}

int RankOf(Scheduler& s, const std::string& node_id, v1::Role role, uint64_t incarnation = 1) {
  int rank = -1;
  grpc::Status status = Register(s, node_id, role, &rank, incarnation);
  EXPECT_TRUE(status.ok()) << node_id << ": " << status.error_message();
  return rank;
}

v1::ClusterView View(Scheduler& s, uint32_t wait_ms) {
  v1::ClusterViewRequest request;
  request.set_wait_ms(wait_ms);
  v1::ClusterView view;
  EXPECT_TRUE(s.GetClusterView(&request, &view).ok());
  return view;
}

grpc::Status Barrier(Scheduler& s, const std::string& name, int rank, uint32_t wait_ms,
                     bool* released) {
  v1::BarrierRequest request;
  request.set_name(name);
  request.set_rank(rank);
  request.set_wait_ms(wait_ms);
  v1::BarrierResponse response;
  grpc::Status status = s.Barrier(&request, &response);
  *released = response.released();
  return status;
}

v1::HeartbeatResponse Heartbeat(Scheduler& s, const std::string& node_id,
                                uint64_t incarnation = 1) {
  v1::HeartbeatRequest request;
  request.set_node_id(node_id);
  request.set_incarnation(incarnation);
  v1::HeartbeatResponse response;
  EXPECT_TRUE(s.Heartbeat(&request, &response).ok());
  return response;
}

grpc::Status Finish(Scheduler& s, const std::string& node_id, int rank, uint64_t steps_done = 0) {
  v1::FinishRequest request;
  request.set_node_id(node_id);
  request.set_rank(rank);
  request.set_steps_done(steps_done);
  request.set_registration_key(Keys()[node_id]);
  v1::FinishResponse response;
  return s.Finish(&request, &response);
}

std::vector<std::string> Dead(const v1::HeartbeatResponse& r) {
  return {r.dead_nodes().begin(), r.dead_nodes().end()};
}

TEST(SchedulerTest, RanksFollowTheNodeIdSuffixWhenFree) {
  auto s = MakeScheduler(2, 3);
  EXPECT_EQ(RankOf(*s, "job-worker-2", v1::WORKER), 2);
  EXPECT_EQ(RankOf(*s, "worker-1", v1::WORKER), 1);
  // No usable suffix: the lowest free rank.
  EXPECT_EQ(RankOf(*s, "trainer", v1::WORKER), 0);

  // Servers are ranked separately from workers.
  EXPECT_EQ(RankOf(*s, "server-1", v1::SERVER), 1);
  // Preferred rank 1 is taken: the lowest free one.
  EXPECT_EQ(RankOf(*s, "other-server-1", v1::SERVER), 0);
}

TEST(SchedulerTest, OutOfRangeSuffixGetsLowestFreeRank) {
  auto s = MakeScheduler(1, 2);
  EXPECT_EQ(RankOf(*s, "worker-7", v1::WORKER), 0);
  EXPECT_EQ(RankOf(*s, "worker-", v1::WORKER), 1);
}

TEST(SchedulerTest, ReRegistrationKeepsTheRank) {
  auto s = MakeScheduler(1, 3);
  EXPECT_EQ(RankOf(*s, "worker-1", v1::WORKER, 100), 1);
  EXPECT_EQ(RankOf(*s, "a", v1::WORKER, 100), 0);
  const uint64_t epoch = View(*s, 0).epoch();
  // The restarted pod: new incarnation, same node_id, same rank.
  EXPECT_EQ(RankOf(*s, "worker-1", v1::WORKER, 200), 1);
  EXPECT_EQ(RankOf(*s, "a", v1::WORKER, 300), 0);
  EXPECT_GT(View(*s, 0).epoch(), epoch) << "a re-registration must bump the epoch";
  // Re-registrations took no new rank: one more worker still fits.
  EXPECT_EQ(RankOf(*s, "b", v1::WORKER), 2);
}

// An async worker's steps are its own (the servers' versions count every
// worker's updates): its restarted process goes on from the step its
// predecessor said last. Before, it computed every step again from 0.
TEST(SchedulerTest, ARestartedAsyncWorkerIsToldTheStepItsPredecessorSaidLast) {
  for (bool sync : {false, true}) {
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 2;
    options.sync = sync;
    options.replace_silent_after_ms = 0;
    Scheduler s(options, &NullMetrics());
    auto registered = [&](const std::string& node_id, uint64_t incarnation) {
      v1::RegisterResponse response;
      EXPECT_TRUE(Register(s, node_id, v1::WORKER, nullptr, incarnation, "", &response).ok());
      return response;
    };
    EXPECT_EQ(registered("worker-0", 1).resume_step(), 0u) << "a first life starts at 0";
    registered("worker-1", 1);
    v1::HeartbeatRequest beat;
    beat.set_node_id("worker-0");
    beat.set_incarnation(1);
    beat.set_step(730);
    v1::HeartbeatResponse answer;
    ASSERT_TRUE(s.Heartbeat(&beat, &answer).ok());
    // Sync: the servers' step is where every worker is; the scheduler says nothing.
    EXPECT_EQ(registered("worker-0", 2).resume_step(), sync ? 0u : 730u) << "sync " << sync;
    EXPECT_EQ(registered("worker-1", 2).resume_step(), 0u) << "it said no step";
    // A life that died before it said a step of its own loses none.
    beat.set_incarnation(2);
    beat.set_step(0);
    ASSERT_TRUE(s.Heartbeat(&beat, &answer).ok());
    EXPECT_EQ(registered("worker-0", 3).resume_step(), sync ? 0u : 730u) << "sync " << sync;
  }
}

TEST(SchedulerTest, OneNodeTooManyIsFailedPreconditionNamingIt) {
  auto s = MakeScheduler(1, 2);
  ASSERT_EQ(RankOf(*s, "worker-0", v1::WORKER), 0);
  ASSERT_EQ(RankOf(*s, "worker-1", v1::WORKER), 1);
  grpc::Status status = Register(*s, "worker-2", v1::WORKER);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("worker-2"));
  EXPECT_THAT(status.error_message(), HasSubstr("2 workers"));
  EXPECT_THAT(status.error_message(), HasSubstr("one too many"));

  ASSERT_EQ(RankOf(*s, "server-0", v1::SERVER), 0);
  status = Register(*s, "server-9", v1::SERVER);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("server-9"));
}

TEST(SchedulerTest, BadRegistrationsAreRejected) {
  auto s = MakeScheduler(1, 1);
  // A server without an address could never be reached.
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("server-0");
  request.mutable_node()->set_role(v1::SERVER);
  v1::RegisterResponse response;
  grpc::Status status = s->Register(&request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("server-0"));
  EXPECT_THAT(status.error_message(), HasSubstr("address"));
  // It took no rank: a proper registration still gets rank 0.
  EXPECT_EQ(RankOf(*s, "server-x", v1::SERVER), 0);

  EXPECT_EQ(Register(*s, "", v1::WORKER).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register(*s, "sched", v1::SCHEDULER).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The same node_id in another role.
  status = Register(*s, "server-x", v1::WORKER);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("server-x"));
}

// On a single-stack IPv6 cluster a server's address is "[ip]:port"; the
// scheduler hands it out as it came. One without brackets could not be
// dialled, so it is refused at registration, naming the server.
TEST(SchedulerTest, ServerAddressesMustBeHostColonPort) {
  auto s = MakeScheduler(2, 1);
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER, nullptr, 1, "[fd00:10:244::7]:7000").ok());
  grpc::Status status = Register(*s, "server-1", v1::SERVER, nullptr, 1, "fd00:10:244::8:7000");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("server-1"));
  EXPECT_THAT(status.error_message(), HasSubstr("[fd00:10:244::8]:7000"));
  EXPECT_EQ(Register(*s, "server-1", v1::SERVER, nullptr, 1, "10.0.0.8").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Register(*s, "server-1", v1::SERVER, nullptr, 1, "[fd00:10:244::8]:7000").ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  v1::ClusterView view = View(*s, 1000);
  ASSERT_TRUE(view.ready());
  ASSERT_EQ(view.servers_size(), 2);
  EXPECT_EQ(view.servers(0).address(), "[fd00:10:244::7]:7000");
  EXPECT_EQ(view.servers(1).address(), "[fd00:10:244::8]:7000");
}

TEST(SchedulerTest, ClusterViewWaitsForEveryNodeThenListsServersInRankOrder) {
  auto s = MakeScheduler(2, 2);
  ASSERT_TRUE(Register(*s, "server-1", v1::SERVER, nullptr, 1, "10.0.0.2:7001").ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());

  auto start = std::chrono::steady_clock::now();
  v1::ClusterView view = View(*s, 60);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 55ms);
  EXPECT_FALSE(view.ready());
  EXPECT_EQ(view.servers_size(), 0);
  EXPECT_EQ(view.num_servers(), 2);
  EXPECT_EQ(view.num_workers(), 2);

  // A long poll in flight is answered as soon as the last node registers.
  auto waiting = std::async(std::launch::async, [&] { return View(*s, 10000); });
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER, nullptr, 1, "10.0.0.1:7000").ok());
  EXPECT_EQ(waiting.wait_for(40ms), std::future_status::timeout) << "ready with a worker missing";
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  view = waiting.get();
  EXPECT_TRUE(view.ready());
  ASSERT_EQ(view.servers_size(), 2);
  EXPECT_EQ(view.servers(0).node_id(), "server-0");
  EXPECT_EQ(view.servers(0).address(), "10.0.0.1:7000");
  EXPECT_EQ(view.servers(0).rank(), 0);
  EXPECT_EQ(view.servers(1).node_id(), "server-1");
  EXPECT_EQ(view.servers(1).address(), "10.0.0.2:7001");
  EXPECT_EQ(view.servers(1).rank(), 1);
  ASSERT_EQ(view.workers_size(), 2);
  EXPECT_EQ(view.workers(0).node_id(), "worker-0");
  EXPECT_EQ(view.workers(1).node_id(), "worker-1");

  // A restarted server that comes back on a new address is seen there.
  ASSERT_TRUE(Register(*s, "server-1", v1::SERVER, nullptr, 2, "10.0.0.3:7001").ok());
  view = View(*s, 0);
  ASSERT_EQ(view.servers_size(), 2);
  EXPECT_EQ(view.servers(1).address(), "10.0.0.3:7001");
}

TEST(SchedulerTest, BarrierReleasesOnlyWhenEveryWorkerArrived) {
  auto s = MakeScheduler(1, 3);
  auto arrive = [&](int rank) {
    return std::async(std::launch::async, [&s, rank] {
      bool released = false;
      EXPECT_TRUE(Barrier(*s, "epoch-1", rank, 10000, &released).ok());
      return released;
    });
  };
  auto r0 = arrive(0);
  auto r2 = arrive(2);
  // The same rank twice does not count as two workers.
  auto r0_again = arrive(0);
  EXPECT_EQ(r0.wait_for(60ms), std::future_status::timeout);
  EXPECT_EQ(r2.wait_for(0ms), std::future_status::timeout);
  EXPECT_EQ(r0_again.wait_for(0ms), std::future_status::timeout);

  bool released = false;
  ASSERT_TRUE(Barrier(*s, "epoch-1", 1, 10000, &released).ok());
  EXPECT_TRUE(released);
  for (auto* f : {&r0, &r2, &r0_again}) {
    ASSERT_EQ(f->wait_for(5s), std::future_status::ready);
    EXPECT_TRUE(f->get());
  }

  // A restarted worker re-entering a released barrier passes at once.
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Barrier(*s, "epoch-1", 2, 10000, &released).ok());
  EXPECT_TRUE(released);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);

  // Barriers are independent by name; an incomplete one times out unreleased.
  ASSERT_TRUE(Barrier(*s, "epoch-2", 0, 30, &released).ok());
  EXPECT_FALSE(released);
}

TEST(SchedulerTest, BarrierRankOutOfRangeIsInvalid) {
  auto s = MakeScheduler(1, 2);
  bool released = true;
  EXPECT_EQ(Barrier(*s, "b", 2, 0, &released).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Barrier(*s, "b", -1, 0, &released).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Those did not count as arrivals: two real workers are still needed.
  ASSERT_TRUE(Barrier(*s, "b", 0, 20, &released).ok());
  EXPECT_FALSE(released);
}

TEST(SchedulerTest, HeartbeatReportsSilentNodesAsDead) {
  auto s = MakeScheduler(1, 2, /*dead_after_ms=*/100);
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER, nullptr, 5).ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER, nullptr, 5).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER, nullptr, 5).ok());
  EXPECT_TRUE(Dead(Heartbeat(*s, "worker-1", 5)).empty());

  // server-0 and worker-1 keep beating; worker-0 goes silent.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(30ms);
    Heartbeat(*s, "server-0", 5);
    Heartbeat(*s, "worker-1", 5);
  }
  auto dead = Dead(Heartbeat(*s, "worker-1", 5));
  EXPECT_THAT(dead, Contains("worker-0"));
  EXPECT_THAT(dead, Not(Contains("worker-1")));
  EXPECT_THAT(dead, Not(Contains("server-0")));

  // A beat from a previous incarnation does not count as the node being
  // alive: that process is told it was replaced.
  EXPECT_TRUE(Heartbeat(*s, "worker-0", 4).replaced());
  dead = Dead(Heartbeat(*s, "worker-1", 5));
  EXPECT_THAT(dead, Contains("worker-0"));
  // A beat from the registered incarnation brings it back.
  dead = Dead(Heartbeat(*s, "worker-0", 5));
  EXPECT_THAT(dead, Not(Contains("worker-0")));
}

// A node silent past dead_after_ms holds up every sync step: its process
// frozen or overloaded, its node cut off. The scheduler says so once, and
// again once it is heard (before, nothing said which worker a job waited for).
TEST(SchedulerTest, ASilentNodeIsSaidOnceAndAgainWhenItIsHeard) {
  auto s = MakeScheduler(1, 2, /*dead_after_ms=*/100);
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER).ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(30ms);
    Heartbeat(*s, "server-0");
    Heartbeat(*s, "worker-1");
  }
  const std::string silent = ::testing::internal::GetCapturedStderr();
  const std::string said = "worker-0 has sent the scheduler nothing for 0.1 s";
  EXPECT_THAT(silent, HasSubstr(said));
  EXPECT_EQ(silent.find(said), silent.rfind(said)) << "said once: " << silent;
  ::testing::internal::CaptureStdout();
  Heartbeat(*s, "worker-0");
  Heartbeat(*s, "worker-1");
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("worker-0 is heard again"));
}

TEST(SchedulerTest, FinishedWorkerIsNotReportedDead) {
  auto s = MakeScheduler(1, 2, /*dead_after_ms=*/50);
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  ASSERT_TRUE(Finish(*s, "worker-0", 0).ok());
  std::this_thread::sleep_for(80ms);
  auto dead = Dead(Heartbeat(*s, "nobody"));
  EXPECT_THAT(dead, Not(Contains("worker-0")));
  EXPECT_THAT(dead, Contains("worker-1"));
}

TEST(SchedulerTest, ShutdownOnlyAfterEveryWorkerFinished) {
  auto s = MakeScheduler(1, 2);
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  EXPECT_FALSE(Heartbeat(*s, "worker-0").shutdown());

  ASSERT_TRUE(Finish(*s, "worker-0", 0).ok());
  ASSERT_TRUE(Finish(*s, "worker-0", 0).ok());  // a resent Finish counts once
  EXPECT_FALSE(Heartbeat(*s, "worker-1").shutdown());
  EXPECT_FALSE(s->AllWorkersFinished());
  EXPECT_FALSE(s->WaitAllWorkersFinished(20ms));

  auto waiter = std::async(std::launch::async, [&] { return s->WaitAllWorkersFinished(10s); });
  EXPECT_EQ(waiter.wait_for(20ms), std::future_status::timeout);
  ASSERT_TRUE(Finish(*s, "worker-1", 1).ok());
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
  EXPECT_TRUE(s->AllWorkersFinished());
  EXPECT_TRUE(Heartbeat(*s, "server-0").shutdown());
}

// A server counts as told the job is over once it says it heard, not once
// an answer saying so left: under message loss that answer may never
// arrive, the scheduler would exit, and the server would wait for an end
// nobody tells it any more, its final checkpoint unwritten.
TEST(SchedulerTest, AServerIsToldTheJobIsOverOnceItSaysItHeard) {
  auto s = MakeScheduler(1, 1);
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER).ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Finish(*s, "worker-0", 0).ok());
  EXPECT_TRUE(Heartbeat(*s, "server-0").shutdown());  // the answer that may be lost
  EXPECT_FALSE(s->WaitServersToldToStop(0ms));

  v1::HeartbeatRequest heard;
  heard.set_node_id("server-0");
  heard.set_incarnation(1);
  heard.set_heard_job_over(true);
  v1::HeartbeatResponse response;
  ASSERT_TRUE(s->Heartbeat(&heard, &response).ok());
  EXPECT_TRUE(s->WaitServersToldToStop(0ms));
}

TEST(SchedulerTest, FinishWithRankOutOfRangeDoesNotEndTheJob) {
  auto s = MakeScheduler(1, 2);
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  ASSERT_TRUE(Finish(*s, "worker-0", 0).ok());
  // A Finish naming a rank that does not exist must not stand in for
  // worker 1, which is still training. (Barrier rejects such ranks.)
  grpc::Status status = Finish(*s, "worker-7", 7);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << "BUG: Finish accepts rank 7 of a 2-worker job";
  EXPECT_FALSE(s->AllWorkersFinished())
      << "BUG: an out-of-range rank counted as a finished worker; the job would shut down while "
         "worker 1 still trains";
  EXPECT_FALSE(Heartbeat(*s, "worker-1").shutdown());
}

// A restarted scheduler knows nobody: it tells each heartbeating node to
// register again, and takes the job's recovery generation and released
// barriers from the nodes, so the job goes on as if it had not restarted.
TEST(SchedulerTest, RestartedSchedulerLearnsTheJobBackFromItsNodes) {
  auto s = MakeScheduler(1, 2);
  v1::HeartbeatResponse beat = Heartbeat(*s, "worker-1", 7);
  EXPECT_TRUE(beat.register_again());
  EXPECT_FALSE(beat.shutdown());

  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("server-0");
  request.mutable_node()->set_role(v1::SERVER);
  request.mutable_node()->set_address("server-0.local:9000");
  request.mutable_node()->set_incarnation(3);
  request.mutable_node()->set_generation(2);
  request.mutable_node()->set_restore_step(150);
  v1::RegisterResponse response;
  ASSERT_TRUE(s->Register(&request, &response).ok());
  EXPECT_EQ(RankOf(*s, "worker-1", v1::WORKER, 7), 1);
  EXPECT_EQ(RankOf(*s, "worker-0", v1::WORKER, 5), 0);

  beat = Heartbeat(*s, "worker-1", 7);
  EXPECT_FALSE(beat.register_again());
  EXPECT_EQ(beat.generation(), 2u);
  EXPECT_EQ(beat.restore_step(), 150u);
  EXPECT_FALSE(beat.generation_ready()) << "server-0 has not reported generation 2 restored";

  // A barrier worker 1 passed before the restart releases a worker that
  // arrives at it now (a worker restarted after the scheduler).
  v1::HeartbeatRequest passed;
  passed.set_node_id("worker-1");
  passed.set_incarnation(7);
  passed.add_passed_barriers("init");
  ASSERT_TRUE(s->Heartbeat(&passed, &beat).ok());
  bool released = false;
  ASSERT_TRUE(Barrier(*s, "init", 0, 10, &released).ok());
  EXPECT_TRUE(released);
}

// A node drain stops the scheduler and a server together: the server's new
// process registers for the first time with the restarted scheduler, which
// knows nothing of it, while the other nodes register again. Its shard
// restored a checkpoint and waits for a rollback: the scheduler must order
// one, or every worker fails on it until backoffLimit ends the job.
TEST(SchedulerTest, AServerThatRestartedWhileTheSchedulerWasDownRollsTheJobBack) {
  for (bool server_first : {true, false}) {
    SCOPED_TRACE(server_first ? "the restarted server registers first" : "it registers last");
    auto s = MakeScheduler(2, 2);
    auto register_node = [&](const std::string& id, v1::Role role, bool again) {
      v1::RegisterRequest request;
      v1::NodeInfo* node = request.mutable_node();
      node->set_node_id(id);
      node->set_role(role);
      node->set_incarnation(again ? 1 : 2);
      node->set_registered_before(again);
      if (again) node->set_rank(id.back() - '0');  // the rank it had, its id's suffix here
      if (role == v1::SERVER) {
        node->set_address(id + ".local:9000");
        node->set_checkpoint_step(again ? -1 : 500);
        node->add_checkpoint_steps(400);
        node->add_checkpoint_steps(500);
      }
      v1::RegisterResponse response;
      ASSERT_TRUE(s->Register(&request, &response).ok()) << id;
    };
    if (server_first) register_node("server-0", v1::SERVER, /*again=*/false);
    register_node("server-1", v1::SERVER, true);
    register_node("worker-0", v1::WORKER, true);
    register_node("worker-1", v1::WORKER, true);
    if (!server_first) register_node("server-0", v1::SERVER, false);
    v1::HeartbeatResponse beat = Heartbeat(*s, "worker-0");
    EXPECT_EQ(beat.generation(), 1u);
    EXPECT_EQ(beat.restore_step(), 500u);
  }
}

// A server's new process registering with the checkpoint steps it holds.
void RegisterRestartedServer(Scheduler& s, const std::string& id, std::vector<uint64_t> steps) {
  v1::RegisterRequest request;
  v1::NodeInfo* node = request.mutable_node();
  node->set_node_id(id);
  node->set_role(v1::SERVER);
  node->set_incarnation(2);
  node->set_address(id + ".local:9000");
  node->set_checkpoint_step(steps.empty() ? -1 : static_cast<int64_t>(steps.back()));
  for (uint64_t step : steps) node->add_checkpoint_steps(step);
  v1::RegisterResponse response;
  ASSERT_TRUE(s.Register(&request, &response).ok()) << id;
}

// A server lost after a worker finished (a drain at the job's end): its
// shard goes back to a checkpoint, and the steps after it would need the
// finished worker's pushes, which never come. Before, the other workers
// redid them and waited for it until their limits, once per restart.
TEST(SchedulerTest, AServerRestartedAfterAWorkerFinishedFailsTheJobNamingTheLostSteps) {
  for (uint64_t steps_done : {0, 120}) {  // not said, or past the checkpoint
    auto s = MakeScheduler(1, 2);
    ASSERT_TRUE(Register(*s, "server-0", v1::SERVER).ok());
    ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
    ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
    ASSERT_TRUE(Finish(*s, "worker-1", 1, steps_done).ok());
    RegisterRestartedServer(*s, "server-0", {100});
    EXPECT_EQ(Heartbeat(*s, "worker-0").generation(), 0u) << "no rollback nobody can redo";
    EXPECT_THAT(s->Failure(), HasSubstr("server-0 restarted after worker 1 finished"));
    EXPECT_THAT(s->Failure(), HasSubstr("from its checkpoint of step 100"));
    EXPECT_EQ(s->FailureReason(), kReasonShardStateLost) << "a restart would find the same";
  }
}

// Where the checkpoint is of the job's last step, the rollback redoes
// nothing: the job goes on to its end, and a worker that finishes before it
// heard of the rollback fails nothing.
TEST(SchedulerTest, AServerRestartedAtTheJobsLastStepCostsNothing) {
  auto s = MakeScheduler(1, 2, 5000, /*workers_keep_parameters=*/true);
  ASSERT_TRUE(Register(*s, "server-0", v1::SERVER).ok());
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  ASSERT_TRUE(Register(*s, "worker-1", v1::WORKER).ok());
  ASSERT_TRUE(Finish(*s, "worker-1", 1, 100).ok());
  RegisterRestartedServer(*s, "server-0", {100});
  EXPECT_EQ(s->Failure(), "");
  EXPECT_EQ(Heartbeat(*s, "worker-0").restore_step(), 100u);
  ASSERT_TRUE(Finish(*s, "worker-0", 0, 100).ok());  // in generation 0
  EXPECT_EQ(s->Failure(), "");
  EXPECT_TRUE(Heartbeat(*s, "server-0", 2).shutdown());
}

// A recovery mid-job with no step every shard holds fails for good, as at
// the job's first start: before, the nodes ended as JobStopped, which the
// run policy restarted once more only to fail the same way.
TEST(SchedulerTest, ARecoveryWithoutACommonCheckpointSaysItsReason) {
  auto s = MakeScheduler(2, 1);
  for (const auto& [id, step] : {std::pair<std::string, uint64_t>{"server-0", 100},
                                 std::pair<std::string, uint64_t>{"server-1", 200}}) {
    v1::RegisterRequest request;
    request.mutable_node()->set_node_id(id);
    request.mutable_node()->set_role(v1::SERVER);
    request.mutable_node()->set_incarnation(1);
    request.mutable_node()->set_address(id + ".local:9000");
    request.mutable_node()->add_checkpoint_steps(step);
    v1::RegisterResponse response;
    ASSERT_TRUE(s->Register(&request, &response).ok());
  }
  ASSERT_TRUE(Register(*s, "worker-0", v1::WORKER).ok());
  RegisterRestartedServer(*s, "server-0", {100});
  EXPECT_THAT(s->Failure(), HasSubstr("no checkpoint step in common"));
  EXPECT_EQ(s->FailureReason(), kReasonNoCommonCheckpoint);
}

// The token check needs real metadata, so this one runs a real gRPC server.
class SchedulerServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 1;
    options.token = JobToken::Fixed("s3cret");
    service_ = std::make_unique<SchedulerService>(options, &NullMetrics());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Scheduler::NewStub(OpenChannel("127.0.0.1:" + std::to_string(port)));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + 5s);
    if (!token.empty()) context->AddMetadata(kTokenMetadataKey, token);
    return context;
  }

  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
};

TEST_F(SchedulerServerTest, RequestsWithoutTheTokenAreUnauthenticated) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("worker-0");
  request.mutable_node()->set_role(v1::WORKER);
  v1::RegisterResponse response;

  grpc::Status status = stub_->Register(Context("").get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  status = stub_->Register(Context("wrong").get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();

  v1::HeartbeatRequest beat;
  v1::HeartbeatResponse beat_response;
  EXPECT_EQ(stub_->Heartbeat(Context("").get(), beat, &beat_response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::FinishRequest finish;
  v1::FinishResponse finish_response;
  EXPECT_EQ(stub_->Finish(Context("").get(), finish, &finish_response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(service_->scheduler().AllWorkersFinished())
      << "an unauthenticated Finish was applied";

  // The rejected Register took no rank: with the token, the worker gets rank 0.
  request.mutable_node()->set_node_id("trainer");
  status = stub_->Register(Context("s3cret").get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.rank(), 0);
}

TEST_F(SchedulerServerTest, FullRendezvousOverTheWire) {
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("server-0");
  request.mutable_node()->set_role(v1::SERVER);
  request.mutable_node()->set_address("127.0.0.1:1234");
  v1::RegisterResponse response;
  ASSERT_TRUE(stub_->Register(Context("s3cret").get(), request, &response).ok());
  request.mutable_node()->set_node_id("worker-0");
  request.mutable_node()->set_role(v1::WORKER);
  ASSERT_TRUE(stub_->Register(Context("s3cret").get(), request, &response).ok());

  v1::ClusterViewRequest view_request;
  view_request.set_wait_ms(1000);
  v1::ClusterView view;
  ASSERT_TRUE(stub_->GetClusterView(Context("s3cret").get(), view_request, &view).ok());
  EXPECT_TRUE(view.ready());
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).address(), "127.0.0.1:1234");

  v1::BarrierRequest barrier;
  barrier.set_name("init");
  barrier.set_rank(0);
  v1::BarrierResponse barrier_response;
  ASSERT_TRUE(stub_->Barrier(Context("s3cret").get(), barrier, &barrier_response).ok());
  EXPECT_TRUE(barrier_response.released());
}

}  // namespace
}  // namespace kubeps
