// Every error of the protocol's table (docs/sidecar-protocol.md, "Requests"),
// through a real server and socket: the code, a message that names what is
// wrong, and a session that goes on unchanged (a failed request changes
// nothing).
#include "worker-agent/sidecar/session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/termination_message.h"
#include "tests/unit/worker-agent/sidecar/sidecar_test_util.h"

namespace kubeps::sidecar {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The reply failed with `code`; its message is returned for more checks.
std::string ExpectError(const json& reply, const std::string& code) {
  EXPECT_EQ(reply.value("ok", true), false) << reply.dump();
  EXPECT_EQ(reply.value("code", ""), code) << reply.dump();
  return reply.value("error", "");
}

using SessionTest = SidecarTest;

TEST_F(SessionTest, APushOfTheWrongSizeNamesTheTensorAndBothSizes) {
  auto client = Ready();
  const std::string error =
      ExpectError(client->Call({{"op", "push"}, {"keys", {0, 1}}, {"step", 0}, {"numel", {6, 4}}}),
                  "InvalidArgument");
  EXPECT_THAT(error, AllOf(HasSubstr("\"b\""), HasSubstr("key 1"), HasSubstr("declared with 5"),
                           HasSubstr("the request has 4")));
  EXPECT_TRUE(kv_.pushes().empty()) << "a failed push moved data";
  // The same for push_pull, and for a pull that states a size.
  ExpectError(client->Call({{"op", "push_pull"}, {"keys", {0}}, {"step", 0}, {"numel", {7}}}),
              "InvalidArgument");
  ExpectError(client->Call({{"op", "pull"}, {"keys", {0}}, {"numel", {1}}}), "InvalidArgument");
  // One numel per key.
  EXPECT_THAT(
      ExpectError(client->Call({{"op", "push"}, {"keys", {0, 1}}, {"step", 0}, {"numel", {6}}}),
                  "InvalidArgument"),
      HasSubstr("2 keys but 1 numel entries"));
  // And a push needs its sizes at all.
  EXPECT_THAT(
      ExpectError(client->Call({{"op", "push"}, {"keys", {0}}, {"step", 0}}), "InvalidArgument"),
      HasSubstr("\"numel\" is required"));
}

TEST_F(SessionTest, ATensorNeverDeclaredIsNotFound) {
  auto client = Ready();
  EXPECT_THAT(
      ExpectError(client->Call({{"op", "push"}, {"keys", {5}}, {"step", 0}, {"numel", {1}}}),
                  "NotFound"),
      AllOf(HasSubstr("key 5 was never declared"), HasSubstr("2 tensors, keys 0 to 1")));
  ExpectError(client->Call({{"op", "pull"}, {"keys", {2}}}), "NotFound");
  EXPECT_THAT(ExpectError(client->Call({{"op", "pull"}, {"keys", {1, 1}}}), "InvalidArgument"),
              HasSubstr("key 1 (\"b\") is listed twice"));
  EXPECT_THAT(ExpectError(client->Call({{"op", "pull"}, {"keys", {"w"}}}), "InvalidArgument"),
              HasSubstr("\"keys\" must be a list of unsigned integers, got [\"w\"]"));
  EXPECT_EQ(kv_.open_tickets(), 0u);
}

TEST_F(SessionTest, CallsBeforeHelloDeclareOrInitAreFailedPreconditions) {
  auto client = Connect();
  EXPECT_EQ(
      ExpectError(client->Call({{"op", "declare"}, {"tensors", {{{"name", "w"}, {"shape", {1}}}}}}),
                  "FailedPrecondition"),
      "declare before hello");
  EXPECT_EQ(ExpectError(client->Call({{"op", "barrier"}, {"name", "x"}}), "FailedPrecondition"),
            "barrier before hello");
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  EXPECT_EQ(ExpectError(client->Call({{"op", "init"}}), "FailedPrecondition"),
            "init before declare");
  ASSERT_TRUE(client->Declare(kTensors, dir_).value("ok", false));
  EXPECT_EQ(ExpectError(client->Call({{"op", "push"}, {"keys", {0}}, {"step", 0}, {"numel", {6}}}),
                        "FailedPrecondition"),
            "push before init");
  EXPECT_EQ(ExpectError(client->Call({{"op", "pull"}}), "FailedPrecondition"), "pull before init");
  EXPECT_EQ(ExpectError(client->Call({{"op", "finish"}}), "FailedPrecondition"),
            "finish before init");
  EXPECT_TRUE(client->Call({{"op", "init"}}).value("ok", false));
  EXPECT_THAT(ExpectError(client->Call({{"op", "init"}}), "FailedPrecondition"),
              HasSubstr("initialized already"));
  EXPECT_EQ(kv_.init_calls(), 1);
  EXPECT_THAT(ExpectError(client->Declare(kTensors, dir_), "FailedPrecondition"),
              HasSubstr("declared its 2 tensors already"));
}

TEST_F(SessionTest, ASecondHelloIsAFailedPrecondition) {
  auto client = Connect();
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  EXPECT_THAT(ExpectError(client->Hello(nonce()), "FailedPrecondition"),
              HasSubstr("already said in this session (by pid " + std::to_string(::getpid())));
}

TEST_F(SessionTest, AnotherAgentsNonceOrProtocolIsRefusedAndHelloMayBeRetried) {
  auto client = Connect();
  const std::string other = "0123456789abcdef0123456789abcdef";
  EXPECT_THAT(ExpectError(client->Hello(other), "InvalidArgument"),
              AllOf(HasSubstr("\"" + other + "\" is another agent's"),
                    HasSubstr(dir_ + "/agent.json"), HasSubstr("same directory")));
  EXPECT_THAT(ExpectError(client->Call({{"op", "hello"}, {"protocol", 2}, {"nonce", nonce()}}),
                          "InvalidArgument"),
              HasSubstr("protocol 2 is not spoken here: this agent speaks protocol 1"));
  EXPECT_THAT(ExpectError(client->Call({{"op", "hello"}, {"protocol", 1}}), "InvalidArgument"),
              HasSubstr("\"nonce\" is required"));
  // Refused hellos did not count.
  json hello = client->Hello(nonce());
  EXPECT_TRUE(hello.value("ok", false)) << hello.dump();
}

TEST_F(SessionTest, DeclareChecksEveryTensor) {
  auto client = Connect();
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  auto declare = [&](json tensors) {
    return client->Call({{"op", "declare"}, {"tensors", tensors}});
  };
  EXPECT_EQ(ExpectError(declare(json::array()), "InvalidArgument"),
            "declare: the list of tensors is empty");
  EXPECT_THAT(ExpectError(declare({{{"name", "w"}, {"shape", {2}}, {"dtype", "float64"}}}),
                          "InvalidArgument"),
              HasSubstr("tensor \"w\" (key 0) has dtype \"float64\": only \"float32\""));
  EXPECT_THAT(
      ExpectError(declare({{{"name", "w"}, {"shape", {2}}}, {{"name", "v"}, {"shape", {3, 0}}}}),
                  "InvalidArgument"),
      HasSubstr("tensor \"v\" (key 1) has dimension 1 = 0: every dimension must be at least 1"));
  EXPECT_THAT(ExpectError(declare({{{"name", "w"}, {"shape", {-2}}}}), "InvalidArgument"),
              HasSubstr("dimension 0 = -2"));
  EXPECT_THAT(
      ExpectError(declare({{{"name", "w"}, {"shape", {2}}}, {{"name", "w"}, {"shape", {3}}}}),
                  "InvalidArgument"),
      HasSubstr("tensors 0 and 1 are both named \"w\""));
  EXPECT_THAT(ExpectError(declare({{{"shape", {2}}}}), "InvalidArgument"),
              HasSubstr("tensor 0 needs a \"name\""));
  EXPECT_THAT(ExpectError(declare({{{"name", "w"}}}), "InvalidArgument"),
              HasSubstr("tensor \"w\" (key 0) needs a \"shape\""));
  EXPECT_TRUE(FilesIn(dir_, "tensors-").empty()) << "a refused declare left a file";
  // A scalar (shape []) is one element.
  json scalar = declare({{{"name", "lr"}, {"shape", json::array()}}});
  ASSERT_TRUE(scalar.value("ok", false)) << scalar.dump();
  EXPECT_EQ(scalar["tensors"][0]["numel"], 1);
}

TEST_F(SessionTest, WaitNamesHandlesNeverIssuedOrWaitedForAlready) {
  auto client = Ready();
  json pulled = client->Call({{"op", "pull"}});
  ASSERT_TRUE(pulled.value("ok", false)) << pulled.dump();
  const uint64_t handle = pulled["handle"];
  EXPECT_THAT(ExpectError(client->Call({{"op", "wait"}, {"handles", {handle, 99}}}), "NotFound"),
              HasSubstr("handle 99 was never issued"));
  EXPECT_TRUE(client->Call({{"op", "wait"}, {"handles", {handle}}}).value("ok", false))
      << "a failed wait consumed the handle";
  EXPECT_THAT(
      ExpectError(client->Call({{"op", "wait"}, {"handles", {handle}}}), "FailedPrecondition"),
      HasSubstr("handle " + std::to_string(handle) + " was waited for already"));
  EXPECT_EQ(
      ExpectError(client->Call({{"op", "wait"}, {"handles", json::array()}}), "InvalidArgument"),
      "wait: \"handles\" is empty");
}

TEST_F(SessionTest, MalformedRequestsAreAnsweredAndTheSessionGoesOn) {
  auto client = Connect();
  EXPECT_THAT(ExpectError(client->Call({{"op", "teleport"}}), "InvalidArgument"),
              HasSubstr("unknown op \"teleport\""));
  // No id: the reply has a null id.
  ASSERT_TRUE(WriteFrame(client->fd(), {{"op", "hello"}}).ok());
  json reply = client->ReceiveAny();
  EXPECT_TRUE(reply["id"].is_null()) << reply.dump();
  EXPECT_THAT(ExpectError(reply, "InvalidArgument"),
              HasSubstr("needs \"id\", an unsigned integer"));
  // Not JSON.
  const std::string junk = std::string("\x03\x00\x00\x00", 4) + "{{{";
  ASSERT_EQ(::write(client->fd(), junk.data(), junk.size()), 7);
  EXPECT_THAT(ExpectError(client->ReceiveAny(), "InvalidArgument"), HasSubstr("not JSON"));
  EXPECT_TRUE(client->Hello(nonce()).value("ok", false));
}

TEST_F(SessionTest, AMessageOver64MebibytesIsAnErrorAndTheEndOfTheSession) {
  auto client = Connect();
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  ASSERT_TRUE(client->Declare(kTensors, dir_).value("ok", false));
  const std::string prefix("\x00\x00\x00\x08", 4);  // 128 MiB
  ASSERT_EQ(::write(client->fd(), prefix.data(), 4), 4);
  EXPECT_THAT(ExpectError(client->ReceiveAny(), "InvalidArgument"),
              AllOf(HasSubstr("134217728 bytes is over the limit"), HasSubstr("closing")));
  EXPECT_TRUE(client->ReceiveAny().contains("closed")) << "the session is still open";
  EXPECT_TRUE(Eventually([&] { return FilesIn(dir_, "tensors-").empty(); }))
      << "the session's file outlived it";
}

// A session past declare, of a job whose servers only average (optimizer
// none) and are at `servers_step`.
class OwnStateTest : public SidecarTest {
 protected:
  std::unique_ptr<TestClient> Declared(bool sync, uint64_t servers_step) {
    StopServer();
    StartServer("none", sync);
    kv_.SetVersion(servers_step);
    auto client = Connect();
    EXPECT_TRUE(client->Hello(nonce()).value("ok", false));
    EXPECT_TRUE(client->Declare(kTensors, dir_).value("ok", false));
    return client;
  }
};

// With the servers' optimizer none they hold averaged gradients, not
// parameters: a program starting past step 0 (the job resumed over an
// earlier run's checkpoints, or the worker restarted) must put back its own
// state of that step. Before, it trained on from fresh values and the job
// ended "Succeeded" with a model that never learned.
TEST_F(OwnStateTest, AStartPastStepZeroWithServersThatOnlyAverageNeedsTheProgramsOwnState) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  const json refused = client->Call({{"op", "init"}});
  EXPECT_THAT(
      ExpectError(refused, "FailedPrecondition"),
      AllOf(HasSubstr("starts at step 100, but the servers' optimizer is none"),
            HasSubstr("kubeps.torch.resume_with(load)"), HasSubstr("spec.checkpoint.path")));
  EXPECT_EQ(refused.value("reason", ""), "ProgramStateMissing");
  EXPECT_EQ(server_->JobFailure().first, "ProgramStateMissing") << "no restart cures it";
  ExpectError(client->Call({{"op", "init"}, {"restores_own_state", "yes"}}), "InvalidArgument");
  const json resumed = client->Call({{"op", "init"}, {"restores_own_state", true}});
  ASSERT_TRUE(resumed.value("ok", false)) << resumed.dump();
  EXPECT_EQ(resumed["step"], 100);
  EXPECT_EQ(server_->JobFailure().first, "") << "cured: the next failure is an ordinary one";
}

// An async worker's steps are its own: the servers' version counts every
// worker's updates. Before, a program started at that version, skipping as
// many of its own steps (all of them, once the others had pushed as many).
TEST_F(OwnStateTest, AnAsyncProgramStartsAtItsOwnStepNotAtTheServersVersion) {
  auto client = Declared(/*sync=*/false, /*servers_step=*/3);
  json init = client->Call({{"op", "init"}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 0) << "a new worker";
  // Restarted: its agent (or the agent its own replaced) says step 2 last.
  kv_.SetStepSaidLast(2);
  client = Declared(/*sync=*/false, /*servers_step=*/3);
  init = client->Call({{"op", "init"}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 2);
}

TEST_F(OwnStateTest, ANewJobWithServersThatOnlyAverageStartsWithoutTheProgramsState) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/0);
  const json init = client->Call({{"op", "init"}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 0);
  EXPECT_EQ(server_->JobFailure().first, "");
}

// A worker killed after the servers' checkpoint of a step and before its
// program's own save of it: the program holds the steps before only, and
// says so. Before, it was started at the step it did not hold.
TEST_F(OwnStateTest, AProgramThatHoldsNoStateOfTheStartStepTakesTheJobBackToOneItHolds) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  EXPECT_THAT(ExpectError(client->Call({{"op", "init"}, {"own_state_steps", {0, "50"}}}),
                          "InvalidArgument"),
              HasSubstr("\"own_state_steps\" must be a list of unsigned integers"));
  const json init =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {0, 50}}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 50);
  ASSERT_EQ(kv_.held_state_requests().size(), 1u);
  EXPECT_EQ(kv_.held_state_requests()[0].first, 100u);
  EXPECT_THAT(kv_.held_state_requests()[0].second, ::testing::ElementsAre(0, 50));
  EXPECT_EQ(server_->JobFailure().first, "");
}

TEST_F(OwnStateTest, AProgramThatHoldsTheStartStepTakesNothingBack) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  const json init =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {50, 100}}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 100);
  EXPECT_TRUE(kv_.held_state_requests().empty());
}

TEST_F(OwnStateTest, ARecoveryToAnotherStepTheProgramDoesNotHoldIsGoneBackFromToo) {
  // A server restarted meanwhile, and its recovery went back to 100 again.
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  kv_.RecoverToFirst({100});
  const json init =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {0, 50}}});
  ASSERT_TRUE(init.value("ok", false)) << init.dump();
  EXPECT_EQ(init["step"], 50);
  EXPECT_EQ(kv_.held_state_requests().size(), 2u);
}

TEST_F(OwnStateTest, StepsSaidWithoutRestoringTheStateTakeNothingBack) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  const json refused = client->Call({{"op", "init"}, {"own_state_steps", {0, 50}}});
  EXPECT_THAT(ExpectError(refused, "FailedPrecondition"),
              HasSubstr("did not say it puts its own state of that step back"));
  EXPECT_TRUE(kv_.held_state_requests().empty()) << "the job went back for nothing";
}

TEST_F(OwnStateTest, AJobStoppedWhileItWouldGoBackIsNoFailureOfTheProgram) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  kv_.FailHeldState(Status::Unavailable("the scheduler did not roll the job back within 1 ms"));
  const json failed =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {50}}});
  EXPECT_THAT(ExpectError(failed, "Unavailable"), HasSubstr("did not roll the job back"));
  EXPECT_EQ(failed.value("reason", ""), "");
  EXPECT_EQ(server_->JobFailure().first, "") << "a restart may cure it";
}

// Refused for another reason while it went back (its rank taken by a new
// process after a scheduler restart): the worker's own end, not the job's.
TEST_F(OwnStateTest, AnotherRefusalWhileItWouldGoBackIsNoFailureOfTheJob) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  kv_.FailHeldState(Status::FailedPrecondition("the restarted scheduler gave worker-0 rank 1"));
  const json failed =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {50}}});
  EXPECT_EQ(failed.value("reason", ""), "");
  EXPECT_EQ(server_->JobFailure().first, "") << "a restart may cure it";
}

TEST_F(OwnStateTest, NoStepToGoBackToFailsTheJobSayingWhy) {
  auto client = Declared(/*sync=*/true, /*servers_step=*/100);
  kv_.FailHeldState(Status::FailedPrecondition(
                        "worker-0's program holds its own state of steps 30, not of step 100")
                        .WithReason(kReasonProgramStateMissing));
  const json refused =
      client->Call({{"op", "init"}, {"restores_own_state", true}, {"own_state_steps", {30}}});
  EXPECT_THAT(ExpectError(refused, "FailedPrecondition"),
              HasSubstr("holds its own state of steps 30, not of step 100"));
  EXPECT_EQ(refused.value("reason", ""), "ProgramStateMissing");
  EXPECT_EQ(server_->JobFailure().first, "ProgramStateMissing");
}

TEST_F(SessionTest, BarrierNamesAreTheClientsOwn) {
  auto client = Connect();
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  EXPECT_TRUE(client->Call({{"op", "barrier"}, {"name", "epoch-1"}}).value("ok", false));
  EXPECT_THAT(kv_.barriers(), ::testing::ElementsAre("sidecar/epoch-1"));
  EXPECT_EQ(ExpectError(client->Call({{"op", "barrier"}, {"name", ""}}), "InvalidArgument"),
            "barrier: \"name\" is empty");
}

// The scheduler's stop of the job for a reason no restart cures, heard by
// any call of the program, not init only: the agent ends with that reason
// and the reply names it, so the job fails at once whichever replica's end
// is heard first. A stop a restart may cure names none.
TEST_F(SessionTest, AnyCallThatHearsAnIncurableStopOfTheJobNamesItsReason) {
  auto client = Connect();
  ASSERT_TRUE(client->Hello(nonce()).value("ok", false));
  kv_.FailBarriers(Status::Error(JobStoppedMessage("", "worker-1 has been gone for 60 s")));
  json failed = client->Call({{"op", "barrier"}, {"name", "a"}});
  EXPECT_THAT(ExpectError(failed, "Internal"), HasSubstr("worker-1 has been gone"));
  EXPECT_EQ(failed.value("reason", ""), "");
  EXPECT_EQ(server_->JobFailure().first, "");
  kv_.FailBarriers(Status::Error(JobStoppedMessage(kReasonNoCommonCheckpoint,
                                                   "its shards hold no checkpoint step in common"))
                       .WithReason(kReasonNoCommonCheckpoint));
  failed = client->Call({{"op", "barrier"}, {"name", "b"}});
  EXPECT_THAT(ExpectError(failed, "Internal"), HasSubstr("no checkpoint step in common"));
  EXPECT_EQ(failed.value("reason", ""), kReasonNoCommonCheckpoint);
  EXPECT_EQ(server_->JobFailure().first, kReasonNoCommonCheckpoint);
}

}  // namespace
}  // namespace kubeps::sidecar
