// The sidecar's `membership` request (docs/sidecar-protocol.md, "Elastic
// jobs") through a real server and socket: a fixed job's answer cut from
// spec.batchSize, an elastic job's from the scheduler's schedule, the pushes
// an elastic job refuses, and the worker scaled away said at finish; and
// `checkpoints`, how far back a rollback can go.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/worker-agent/sidecar/sidecar_test_util.h"

namespace kubeps::sidecar {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

json Push(TestClient& client, uint64_t step) {
  return client.Call({{"op", "push"}, {"keys", {0}}, {"step", step}, {"numel", {6}}});
}

json Membership(TestClient& client, uint64_t step) {
  return client.Call({{"op", "membership"}, {"step", step}});
}

// Worker 0 of two from step 0, alone from step 10 to 19, gone from 20 on:
// a job scaled 2 -> 1 -> 0 of this rank, with its examples of a global
// batch of 128.
StepMembership TwoThenOneThenNone(uint64_t step) {
  StepMembership out;
  out.global_batch = 128;
  if (step >= 20) return out;
  out.member = true;
  out.count = step < 10 ? 2 : 1;
  BatchRun(out.global_batch, 0, out.count, &out.first_example, &out.end_example);
  return out;
}

class SessionMembershipTest : public SidecarTest {
 protected:
  void StartElastic() {
    StopServer();
    StartServer("sgd", true, /*elastic=*/true);
    kv_.SetSchedule(TwoThenOneThenNone);
  }
};

TEST_F(SessionMembershipTest, AFixedJobsWorkerComputesEveryStepOnItsRunOfTheSpecsBatch) {
  auto client = Connect();
  json hello = client->Hello(nonce());
  EXPECT_EQ(hello.value("elastic", true), false) << hello.dump();
  EXPECT_EQ(hello.value("batch_size", 0), 64);
  client->Declare(kTensors, dir_);
  ASSERT_TRUE(client->Call({{"op", "init"}}).value("ok", false));
  json share = Membership(*client, 7);
  ASSERT_TRUE(share.value("ok", false)) << share.dump();
  EXPECT_EQ(share["member"], true);
  EXPECT_EQ(share["global_batch"], 64);  // spec.batchSize x 1 worker
  EXPECT_EQ(share["first_example"], 0);
  EXPECT_EQ(share["end_example"], 64);
  EXPECT_EQ(share["scaled_away"], false);
  EXPECT_FALSE(share.contains("next_member_step"));
  // A fixed job's program need not ask.
  EXPECT_TRUE(Push(*client, 8).value("ok", false));
}

TEST_F(SessionMembershipTest, AnElasticJobsAnswerIsTheSchedulesCutOfItsGlobalBatch) {
  StartElastic();
  auto client = Connect();
  EXPECT_EQ(client->Hello(nonce()).value("elastic", false), true);
  client->Declare(kTensors, dir_);
  EXPECT_THAT(Membership(*client, 0).value("error", ""), HasSubstr("membership before init"));
  ASSERT_TRUE(client->Call({{"op", "init"}}).value("ok", false));
  json two = Membership(*client, 3);
  EXPECT_EQ(two["count"], 2);
  EXPECT_EQ(two["end_example"], 64);
  json one = Membership(*client, 12);
  EXPECT_EQ(one["count"], 1);
  EXPECT_EQ(one["first_example"], 0);
  EXPECT_EQ(one["end_example"], 128);
  EXPECT_EQ(one["global_batch"], 128);
  EXPECT_EQ(Membership(*client, 25)["member"], false);
  EXPECT_THAT(client->Call({{"op", "membership"}}).value("error", ""),
              HasSubstr("\"step\" is required"));
}

TEST_F(SessionMembershipTest, AnElasticJobRefusesAPushOfAStepNotSaidToBeTheWorkers) {
  StartElastic();
  auto client = Ready();
  const json refused = Push(*client, 3);
  EXPECT_EQ(refused.value("code", ""), "FailedPrecondition") << refused.dump();
  EXPECT_THAT(refused.value("error", ""),
              AllOf(HasSubstr("push of step 3"), HasSubstr("ask membership before each step")));
  EXPECT_EQ(client->Call({{"op", "push_pull"}, {"keys", {0}}, {"step", 3}, {"numel", {6}}})
                .value("code", ""),
            "FailedPrecondition");
  EXPECT_TRUE(kv_.pushes().empty()) << "a refused push reached the servers";

  ASSERT_EQ(Membership(*client, 3)["member"], true);
  json pushed = Push(*client, 3);
  ASSERT_TRUE(pushed.value("ok", false)) << pushed.dump();
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {pushed["handle"]}}}).value("ok", false));
  ASSERT_EQ(kv_.pushes().size(), 1u);
  // Not a member of step 25: even asked, its push is refused.
  ASSERT_EQ(Membership(*client, 25)["member"], false);
  EXPECT_EQ(Push(*client, 25).value("code", ""), "FailedPrecondition");
  // A rollback's resume step, asked about after later steps, may be pushed again.
  for (uint64_t step = 4; step < 19; ++step) ASSERT_EQ(Membership(*client, step)["member"], true);
  ASSERT_EQ(Membership(*client, 2)["member"], true);
  EXPECT_TRUE(Push(*client, 2).value("ok", false));
  // Pulls need no membership (a worker taken in pulls its first step's values).
  EXPECT_TRUE(client->Call({{"op", "pull"}, {"min_version", 0}}).value("ok", false));
}

TEST_F(SessionMembershipTest, AWorkerThatComputedAndIsNoMemberAnyMoreWasScaledAway) {
  StartElastic();
  {
    auto client = Ready();
    // Not computed yet: a worker not in the schedule waits to be taken in.
    EXPECT_EQ(Membership(*client, 20)["scaled_away"], false);
    client->Call({{"op", "bye"}});
  }
  auto client = Ready();
  ASSERT_EQ(Membership(*client, 19)["member"], true);
  json pushed = Push(*client, 19);
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {pushed["handle"]}}}).value("ok", false));
  json gone = Membership(*client, 20);
  EXPECT_EQ(gone["member"], false);
  EXPECT_EQ(gone["scaled_away"], true);
  EXPECT_FALSE(gone.contains("next_member_step"));
  EXPECT_FALSE(server_->ScaledAwayAt()) << "said before the program finished";
  ASSERT_TRUE(client->Call({{"op", "finish"}}).value("ok", false));
  EXPECT_EQ(server_->ScaledAwayAt(), std::optional<uint64_t>(20));
  EXPECT_EQ(kv_.finish_calls(), 1) << "the scheduler hears the finish: the worker's leaving";
}

TEST_F(SessionMembershipTest, AWorkerScaledAwayAndTakenBackInDoesNotSayItLeft) {
  StartElastic();
  auto client = Ready();
  ASSERT_EQ(Membership(*client, 19)["member"], true);
  json pushed = Push(*client, 19);
  ASSERT_TRUE(client->Call({{"op", "wait"}, {"handles", {pushed["handle"]}}}).value("ok", false));
  ASSERT_EQ(Membership(*client, 20)["scaled_away"], true);
  // Wanted again before it left (a scheduler that restarted forgot it was
  // leaving): it trains on, and its finish is the job's end, not a leaving.
  kv_.SetSchedule(TakenInAt(40, 0, 1));
  EXPECT_EQ(Membership(*client, 20)["next_member_step"], 40);
  ASSERT_TRUE(client->Call({{"op", "finish"}}).value("ok", false));
  EXPECT_FALSE(server_->ScaledAwayAt());
}

TEST_F(SessionMembershipTest, AWorkerTakenInLaterIsToldFromWhichStep) {
  StartElastic();
  kv_.SetSchedule(TakenInAt(40, 1, 2));
  auto client = Ready();
  json waiting = Membership(*client, 31);
  EXPECT_EQ(waiting["member"], false);
  EXPECT_EQ(waiting["next_member_step"], 40);
  EXPECT_EQ(waiting["scaled_away"], false);
  json taken_in = Membership(*client, 40);
  EXPECT_EQ(taken_in["first_example"], 64);
  EXPECT_EQ(taken_in["end_example"], 128);
}

TEST_F(SessionMembershipTest, CheckpointsSaysHowFarBackARollbackCanGo) {
  auto client = Connect();
  client->Hello(nonce());
  json early = client->Call({{"op", "checkpoints"}});
  EXPECT_EQ(early["code"], "FailedPrecondition") << early.dump();
  EXPECT_THAT(early.value("error", ""), HasSubstr("checkpoints before init"));
  client->Declare(kTensors, dir_);
  ASSERT_TRUE(client->Call({{"op", "init"}}).value("ok", false));
  EXPECT_EQ(client->Call({{"op", "checkpoints"}})["newest_common_step"], -1) << "none known";
  kv_.SetNewestCommonCheckpoint(200);
  EXPECT_EQ(client->Call({{"op", "checkpoints"}})["newest_common_step"], 200);
}

}  // namespace
}  // namespace kubeps::sidecar
