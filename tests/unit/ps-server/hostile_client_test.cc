// What a client holding the job's token (or a buggy one) can send to a shard
// and to the scheduler's barrier, and what it gets: every field it controls
// is bounded and checked, each refusal is INVALID_ARGUMENT with a message
// that names the field, and nothing it sends changes the shard's state.
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "ps-server/scheduler.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using shard_testing::Bytes;
using ::testing::HasSubstr;

std::unique_ptr<Shard> MakeShard(int num_workers) {
  return shard_testing::MakeShard(shard_testing::PlainShardOptions(true, num_workers));
}

template <typename Message>
void AddPart(Message* m, uint32_t key, uint64_t offset, uint64_t length) {
  v1::PartRef* p = m->add_parts();
  p->set_key(key);
  p->set_offset(offset);
  p->set_length(length);
}

grpc::Status Init(Shard& shard, uint32_t key, const std::vector<float>& values) {
  v1::InitRequest request;
  request.mutable_id()->set_node_id("worker-0");
  AddPart(&request, key, 0, values.size());
  request.set_data(Bytes(values));
  v1::InitResponse response;
  return shard.Init(request, &response);
}

v1::PushRequest PushOf(uint32_t key, const std::vector<float>& grad, uint64_t seq = 0) {
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-0");
  request.mutable_id()->set_incarnation(1);
  request.mutable_id()->set_seq(seq);
  request.set_worker_rank(0);
  AddPart(&request, key, 0, grad.size());
  request.set_data(Bytes(grad));
  return request;
}

grpc::Status Push(Shard& shard, const v1::PushRequest& request) {
  PushData data({request.data()});
  return shard.Push(request, data);
}

TEST(HostileClientTest, PullNamingThePartTwiceIsRefused) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, std::vector<float>(1000, 1.0f)).ok());
  // 300 times the same part: today's shard would answer 300 copies.
  v1::PullRequest request;
  for (int i = 0; i < 300; ++i) AddPart(&request, 0, 0, 1000);
  PullAnswer answer;
  grpc::Status s = shard->Pull(request, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("part (key 0, offset 0, length 1000) listed twice"));
  EXPECT_TRUE(answer.values.empty()) << "nothing was taken for the answer";
}

TEST(HostileClientTest, PullOfTooManyPartsIsRefused) {
  auto shard = MakeShard(1);
  v1::PullRequest request;
  for (uint32_t key = 0; key <= 65536; ++key) AddPart(&request, key, 0, 1);
  PullAnswer answer;
  grpc::Status s = shard->Pull(request, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("names 65537 parts, at most 65536"));
}

TEST(HostileClientTest, PullOfTooManyBytesIsRefused) {
  auto shard = MakeShard(1);
  v1::PullRequest request;
  // 2^26 floats and one more: 256 MiB and 4 bytes, over the bound of an answer.
  AddPart(&request, 0, 0, 1ull << 26);
  AddPart(&request, 1, 0, 1);
  PullAnswer answer;
  grpc::Status s = shard->Pull(request, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("268435460 bytes, more than the 268435456"));
}

TEST(HostileClientTest, PullWaitOverSixtySecondsIsRefused) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  v1::PullRequest request;
  AddPart(&request, 0, 0, 3);
  request.set_min_version(5);
  request.set_wait_ms(4233600000u);  // 49 days
  PullAnswer answer;
  auto pull = std::async(std::launch::async, [&] { return shard->Pull(request, &answer); });
  ASSERT_EQ(pull.wait_for(10s), std::future_status::ready) << "the pull waited";
  grpc::Status s = pull.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("wait_ms 4233600000 is over the bound of 60000"));
}

TEST(HostileClientTest, WaitingPullEndsWhenTheCallIsCancelled) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  v1::PullRequest request;
  AddPart(&request, 0, 0, 3);
  request.set_min_version(5);
  request.set_wait_ms(60000);
  std::atomic<bool> cancelled{false};
  PullAnswer answer;
  auto pull = std::async(std::launch::async, [&] {
    return shard->Pull(request, &answer, [&] { return cancelled.load(); });
  });
  EXPECT_EQ(pull.wait_for(100ms), std::future_status::timeout);
  cancelled = true;
  ASSERT_EQ(pull.wait_for(5s), std::future_status::ready) << "a cancelled pull kept waiting";
  EXPECT_EQ(pull.get().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(HostileClientTest, WaitingPullEndsWhenTheShardStops) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  v1::PullRequest request;
  AddPart(&request, 0, 0, 3);
  request.set_min_version(5);
  request.set_wait_ms(60000);
  PullAnswer answer;
  auto pull = std::async(std::launch::async, [&] { return shard->Pull(request, &answer); });
  EXPECT_EQ(pull.wait_for(100ms), std::future_status::timeout);
  shard->Stop();
  ASSERT_EQ(pull.wait_for(5s), std::future_status::ready) << "a stopped shard kept a pull waiting";
  grpc::Status s = pull.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("shutting down"));
}

TEST(HostileClientTest, InitOfANewKeyAfterTheFirstPushIsRefused) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  ASSERT_TRUE(Push(*shard, PushOf(0, {1, 1, 1})).ok());
  grpc::Status s = Init(*shard, 9, {5});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("part (key 9, offset 0, length 1)"));
  EXPECT_THAT(s.error_message(), HasSubstr("the key set is fixed since the first push"));
  EXPECT_TRUE(shard->PartValue(9, 0).empty());
  // A known part (a restarted rank 0 initialising again) is still fine.
  EXPECT_TRUE(Init(*shard, 0, {7, 7, 7}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{0, 1, 2}));
}

TEST(HostileClientTest, PushWithoutRequestIdIsRefused) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  v1::PushRequest request = PushOf(0, {1, 1, 1});
  request.clear_id();
  grpc::Status s = Push(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("push without a request id (id.node_id is empty)"));
  request = PushOf(0, {1, 1, 1});
  request.mutable_id()->clear_node_id();
  s = Push(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("id.node_id is empty"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard->dedup().TrackedRequests(), 0u) << "sender \"\" was recorded";
}

TEST(HostileClientTest, PushListingThePartTwiceIsRefused) {
  auto shard = MakeShard(1);
  ASSERT_TRUE(Init(*shard, 0, {1, 2, 3}).ok());
  v1::PushRequest request = PushOf(0, {1, 1, 1});
  AddPart(&request, 0, 0, 3);
  request.set_data(Bytes({1, 1, 1, 1, 1, 1}));
  grpc::Status s = Push(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("part (key 0, offset 0, length 3) listed twice"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
}

TEST(HostileClientTest, BarrierWaitOverSixtySecondsIsRefused) {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  Scheduler scheduler(options, &NullMetrics());
  v1::BarrierRequest request;
  request.set_name("start");
  request.set_rank(0);
  request.set_wait_ms(4233600000u);
  v1::BarrierResponse response;
  auto barrier =
      std::async(std::launch::async, [&] { return scheduler.Barrier(&request, &response); });
  ASSERT_EQ(barrier.wait_for(10s), std::future_status::ready) << "the barrier waited";
  grpc::Status s = barrier.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("wait_ms 4233600000 is over the bound of 60000"));
}

// Before, the scheduler's long polls looked at neither the call's
// cancellation nor the scheduler's end: at the end of a job its gRPC
// Shutdown waited out every Barrier and GetClusterView in flight.
class SchedulerLongPollTest : public ::testing::TestWithParam<bool> {
 protected:
  SchedulerLongPollTest() {
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 2;
    scheduler_ = std::make_unique<Scheduler>(options, &NullMetrics());
  }

  // Starts a 60 s Barrier (or GetClusterView) that nothing will release.
  std::future<grpc::Status> StartWaiting(bool barrier) {
    return std::async(std::launch::async, [this, barrier] {
      auto cancelled = [this] { return cancelled_.load(); };
      if (barrier) {
        v1::BarrierRequest request;
        request.set_name("start");
        request.set_rank(0);
        request.set_wait_ms(60000);
        v1::BarrierResponse response;
        return scheduler_->Barrier(&request, &response, cancelled);
      }
      v1::ClusterViewRequest request;
      request.set_wait_ms(60000);
      v1::ClusterView view;
      return scheduler_->GetClusterView(&request, &view, cancelled);
    });
  }

  std::unique_ptr<Scheduler> scheduler_;
  std::atomic<bool> cancelled_{false};
};

TEST_P(SchedulerLongPollTest, EndsWhenTheCallIsCancelled) {
  auto call = StartWaiting(GetParam());
  EXPECT_EQ(call.wait_for(100ms), std::future_status::timeout);
  cancelled_ = true;
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready) << "a cancelled call kept waiting";
  grpc::Status s = call.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_THAT(s.error_message(), HasSubstr("cancelled while it waited"));
}

TEST_P(SchedulerLongPollTest, EndsWhenTheSchedulerStops) {
  auto call = StartWaiting(GetParam());
  EXPECT_EQ(call.wait_for(100ms), std::future_status::timeout);
  scheduler_->Stop();
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready) << "a stopped scheduler kept it waiting";
  grpc::Status s = call.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("the scheduler is shutting down"));
}

INSTANTIATE_TEST_SUITE_P(BarrierAndClusterView, SchedulerLongPollTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Barrier" : "ClusterView"; });

// Control calls from a client that holds the job's token but is not the
// node it names. Before, two Finish calls for the two workers shut the
// servers and the scheduler down while the workers still trained, and two
// Register calls of a live server with a new incarnation and a made-up
// checkpoint step opened a recovery and took the server's address.
class HostileControlCallTest : public ::testing::Test {
 protected:
  HostileControlCallTest() {
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 2;
    options.replace_silent_after_ms = 300;
    scheduler_ = std::make_unique<Scheduler>(options, &NullMetrics());
    keys_["server-0"] = Register("server-0", v1::SERVER, 11, "10.0.0.5:9000").registration_key();
    keys_["worker-0"] = Register("worker-0", v1::WORKER, 21).registration_key();
    keys_["worker-1"] = Register("worker-1", v1::WORKER, 22).registration_key();
  }
  v1::RegisterResponse Register(const std::string& id, v1::Role role, uint64_t incarnation,
                                const std::string& address = "", grpc::Status* status = nullptr,
                                int64_t made_up_step = -1) {
    v1::RegisterRequest request;
    request.mutable_node()->set_node_id(id);
    request.mutable_node()->set_role(role);
    request.mutable_node()->set_incarnation(incarnation);
    request.mutable_node()->set_address(address);
    if (made_up_step >= 0) request.mutable_node()->add_checkpoint_steps(made_up_step);
    v1::RegisterResponse response;
    grpc::Status s = scheduler_->Register(&request, &response);
    if (status) *status = s;
    return response;
  }
  grpc::Status Finish(const std::string& id, int rank, const std::string& key) {
    v1::FinishRequest request;
    request.set_node_id(id);
    request.set_rank(rank);
    request.set_registration_key(key);
    v1::FinishResponse response;
    return scheduler_->Finish(&request, &response);
  }
  v1::HeartbeatResponse Beat(const std::string& id, uint64_t incarnation) {
    v1::HeartbeatRequest request;
    request.set_node_id(id);
    request.set_incarnation(incarnation);
    v1::HeartbeatResponse response;
    EXPECT_TRUE(scheduler_->Heartbeat(&request, &response).ok());
    return response;
  }
  std::unique_ptr<Scheduler> scheduler_;
  std::map<std::string, std::string> keys_;
};

TEST_F(HostileControlCallTest, FinishFromAnyoneButTheNodeItNamesIsRefused) {
  for (const std::string key : {"", "0123456789abcdef0123456789abcdef"}) {
    grpc::Status s = Finish("worker-0", 0, key);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(s.error_message(),
                HasSubstr("Finish for worker-0 (rank 0) refused: the caller is not the process "
                          "registered under that name"));
  }
  // One worker's key does not finish another.
  EXPECT_EQ(Finish("worker-1", 1, keys_["worker-0"]).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(scheduler_->AllWorkersFinished());
  EXPECT_FALSE(Beat("server-0", 11).shutdown()) << "the servers were told the job is over";

  ASSERT_TRUE(Finish("worker-0", 0, keys_["worker-0"]).ok());
  ASSERT_TRUE(Finish("worker-1", 1, keys_["worker-1"]).ok());
  EXPECT_TRUE(scheduler_->AllWorkersFinished());
}

TEST_F(HostileControlCallTest, RegisteringALiveServerAgainIsRefusedAndChangesNothing) {
  Beat("server-0", 11);
  grpc::Status s;
  Register("server-0", v1::SERVER, 666, "10.9.9.9:1", &s, /*made_up_step=*/999999);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(),
              HasSubstr("server-0 is registered and alive (incarnation 11, heard from"));
  EXPECT_THAT(s.error_message(), HasSubstr("another process claiming its name is refused"));
  v1::HeartbeatResponse beat = Beat("server-0", 11);
  EXPECT_EQ(beat.generation(), 0u) << "a recovery was opened";
  v1::ClusterViewRequest request;
  v1::ClusterView view;
  ASSERT_TRUE(scheduler_->GetClusterView(&request, &view).ok());
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).address(), "10.0.0.5:9000");
  EXPECT_EQ(view.servers(0).incarnation(), 11u);
}

TEST_F(HostileControlCallTest, AWorkerRestartedAfterItsPredecessorFellSilentIsAccepted) {
  grpc::Status s;
  Register("worker-1", v1::WORKER, 23, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "its predecessor was just heard";
  std::this_thread::sleep_for(400ms);  // replace_silent_after_ms is 300
  const std::string key = Register("worker-1", v1::WORKER, 23, "", &s).registration_key();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(key, keys_["worker-1"]);
  EXPECT_EQ(Finish("worker-1", 1, keys_["worker-1"]).error_code(),
            grpc::StatusCode::PERMISSION_DENIED)
      << "the dead life's key still finishes the worker";
  EXPECT_TRUE(Finish("worker-1", 1, key).ok());
}

}  // namespace
}  // namespace kubeps
