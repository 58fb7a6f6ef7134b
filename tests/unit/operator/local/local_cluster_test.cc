// The local backend of the job logic (operator/local/local_cluster.h), with
// /bin/sh as the replica's binary: environment, exit codes and signals,
// restarts that keep their gRPC port, graceful then forced deletion, and
// children that never outlive the cluster.
#include "operator/local/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sidecar_folder.h"
#include "common/termination_message.h"

namespace kubeps::local {
namespace {

using controller::ReplicaLaunch;
using controller::ReplicaName;
using controller::ReplicaPhase;
using controller::ReplicaRole;
using controller::ReplicaStatus;
using namespace std::chrono_literals;

const ReplicaName kScheduler{ReplicaRole::kScheduler, 0};
const ReplicaName kWorker{ReplicaRole::kWorker, 0};

bool Eventually(const std::function<bool()>& condition, std::chrono::seconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

class LocalClusterTest : public ::testing::Test {
 protected:
  LocalClusterTest()
      : run_dir_(::testing::TempDir() + "local_cluster_test_" + std::to_string(::getpid())) {
    std::filesystem::create_directories(run_dir_);
    cluster_ = std::make_unique<LocalCluster>("/bin", run_dir_, /*grace_ms=*/5000);
  }
  ~LocalClusterTest() override {
    cluster_.reset();
    std::filesystem::remove_all(run_dir_);
  }

  // Runs `script` with /bin/sh as replica `name`.
  Status Run(const ReplicaName& name, const std::string& script,
             std::map<std::string, std::string> env = {}) {
    env["RUN_DIR"] = run_dir_;
    return cluster_->Create(ReplicaLaunch{name, "sh", {"-c", script}, env});
  }
  ReplicaStatus StatusOf(const ReplicaName& name) {
    for (const ReplicaStatus& status : cluster_->List()) {
      if (status.name == name) return status;
    }
    return ReplicaStatus{name, ReplicaPhase::kPending, -1, -1};
  }
  bool Ended(const ReplicaName& name) {
    const ReplicaPhase phase = StatusOf(name).phase;
    return phase == ReplicaPhase::kSucceeded || phase == ReplicaPhase::kFailed;
  }

  std::string run_dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(LocalClusterTest, RunsTheBinaryWithTheLaunchsEnvironment) {
  ASSERT_TRUE(Run(kWorker, "echo \"$KUBEPS_ROLE $GREETING\" > \"$RUN_DIR/out\"",
                  {{"KUBEPS_ROLE", "worker"}, {"GREETING", "hello"}})
                  .ok());
  EXPECT_GT(cluster_->Pid(kWorker), 0);
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kSucceeded);
  EXPECT_EQ(ReadFile(run_dir_ + "/out"), "worker hello\n");
  EXPECT_EQ(cluster_->Pid(kWorker), -1);
}

TEST_F(LocalClusterTest, ExitCodesAndSignalsAreReported) {
  ASSERT_TRUE(Run(kWorker, "exit 3").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kFailed);
  EXPECT_EQ(StatusOf(kWorker).exit_code, 3);

  ASSERT_TRUE(Run(kScheduler, "kill -9 $$").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kScheduler); }));
  EXPECT_EQ(StatusOf(kScheduler).exit_code, 128 + SIGKILL);
}

TEST_F(LocalClusterTest, AMissingBinaryFailsWith127) {
  ASSERT_TRUE(cluster_->Create(ReplicaLaunch{kWorker, "no-such-binary", {}, {}}).ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).exit_code, 127);
}

TEST_F(LocalClusterTest, ALiveReplicaIsNotStartedTwice) {
  ASSERT_TRUE(Run(kWorker, "exec sleep 60").ok());
  Status again = Run(kWorker, "exit 0");
  EXPECT_FALSE(again.ok());
  EXPECT_THAT(again.message(), ::testing::HasSubstr("worker-0 is still running"));
}

// Peers know a replica by its address: a restart binds the port the first
// process published, and counts as a restart.
TEST_F(LocalClusterTest, ARestartKeepsThePublishedGrpcPort) {
  ASSERT_TRUE(Run(kScheduler,
                  "printf 'grpc 41234\\nmetrics 9999\\n' > \"$RUN_DIR/scheduler-0.ports\"; exit 1")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kScheduler); }));
  EXPECT_EQ(cluster_->SchedulerAddress(), "127.0.0.1:41234");
  EXPECT_EQ(cluster_->MetricsPort(kScheduler), 9999);
  ASSERT_TRUE(Run(kScheduler, "echo \"$KUBEPS_PORT\" > \"$RUN_DIR/port\"").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kScheduler); }));
  EXPECT_EQ(ReadFile(run_dir_ + "/port"), "41234\n");
  EXPECT_EQ(StatusOf(kScheduler).restarts, 1);
  EXPECT_EQ(cluster_->MetricsPort(kScheduler), 0) << "the new process picks a new metrics port";
}

// `kubeps run` of a job again in the folder of its earlier run: the earlier
// run's ports file is not this run's, and its port may be another
// process's by now (the replica could not listen, and the job failed).
TEST_F(LocalClusterTest, AFirstStartInTheFolderOfAnEarlierRunBindsAPortOfItsOwn) {
  {
    std::ofstream stale(run_dir_ + "/scheduler-0.ports");
    stale << "grpc 41234\nmetrics 9999\n";
  }
  ASSERT_TRUE(Run(kScheduler, "echo \"port=$KUBEPS_PORT\" > \"$RUN_DIR/port\"").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kScheduler); }));
  EXPECT_EQ(ReadFile(run_dir_ + "/port"), "port=\n");
  EXPECT_EQ(StatusOf(kScheduler).restarts, 0);
}

// A worker that left a scaled-down job and is wanted again joins anew: its
// new process is not a restart, which backoffLimit would count.
TEST_F(LocalClusterTest, AWorkerScaledAwayAndStartedAgainIsNotARestart) {
  ASSERT_TRUE(
      Run(kWorker, "echo 'ScaledAway: left the job at step 80' > \"$RUN_DIR/worker-0.termination\"")
          .ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).reason, kReasonScaledAway);
  ASSERT_TRUE(Run(kWorker, "exit 1").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).restarts, 0);
  ASSERT_TRUE(Run(kWorker, "exit 0").ok());  // after a failure: a restart
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).restarts, 1);
}

TEST_F(LocalClusterTest, NoAddressUntilTheSchedulerPublishedOne) {
  EXPECT_EQ(cluster_->SchedulerAddress(), "");
  ASSERT_TRUE(Run(kScheduler, "exec sleep 60").ok());
  EXPECT_EQ(cluster_->SchedulerAddress(), "");
}

TEST_F(LocalClusterTest, DeleteStopsAReplicaAndForgetsIt) {
  ASSERT_TRUE(Run(kWorker, "exec sleep 60").ok());
  const pid_t pid = cluster_->Pid(kWorker);
  ASSERT_TRUE(cluster_->Delete(kWorker).ok());
  EXPECT_FALSE(Exists(pid));
  EXPECT_TRUE(cluster_->List().empty());
  EXPECT_TRUE(cluster_->Delete(kWorker).ok()) << "deleting what is gone is fine";
}

TEST_F(LocalClusterTest, AReplicaIgnoringSigtermIsKilledAfterTheGracePeriod) {
  cluster_ = std::make_unique<LocalCluster>("/bin", run_dir_, /*grace_ms=*/300);
  ASSERT_TRUE(
      Run(kWorker, "trap '' TERM; touch \"$RUN_DIR/ready\"; while :; do sleep 1; done").ok());
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(run_dir_ + "/ready"); }));
  const pid_t pid = cluster_->Pid(kWorker);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->Delete(kWorker).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms) << "it was given its grace period";
  EXPECT_FALSE(Exists(pid));
}

// Ctrl-C must end a job within a second: replicas deleted together are all
// sent SIGTERM at once and share one grace period, not one each in turn.
TEST_F(LocalClusterTest, ReplicasDeletedTogetherShareOneGracePeriod) {
  const std::vector<ReplicaName> names{{ReplicaRole::kWorker, 0},
                                       {ReplicaRole::kServer, 0},
                                       {ReplicaRole::kServer, 1},
                                       {ReplicaRole::kScheduler, 0}};
  std::vector<pid_t> pids;
  for (const ReplicaName& name : names) {
    const std::string ready = run_dir_ + "/" + name.ToString() + ".ready";
    ASSERT_TRUE(Run(name, "trap '' TERM; touch \"" + ready + "\"; while :; do sleep 1; done").ok());
    ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(ready); }));
    pids.push_back(cluster_->Pid(name));
  }
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->DeleteAll(names, 300).ok());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 300ms) << "they were given their grace period";
  EXPECT_LT(took, 600ms) << "each got a grace period of its own, one after the other";
  for (pid_t pid : pids) EXPECT_FALSE(Exists(pid));
  EXPECT_TRUE(cluster_->List().empty());
}

TEST_F(LocalClusterTest, DeletingReplicasThatStopAtOnceTakesNoGracePeriod) {
  const std::vector<ReplicaName> names{kWorker, kScheduler};
  for (const ReplicaName& name : names) ASSERT_TRUE(Run(name, "exec sleep 60").ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->DeleteAll(names, 5000).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_TRUE(cluster_->List().empty());
}

TEST_F(LocalClusterTest, ChildrenDoNotOutliveTheCluster) {
  ASSERT_TRUE(Run(kWorker, "exec sleep 60").ok());
  const pid_t pid = cluster_->Pid(kWorker);
  ASSERT_TRUE(Exists(pid));
  cluster_.reset();
  EXPECT_FALSE(Exists(pid));
}

// A worker of a job that brings its own program: a pod of two processes,
// the agent (here /bin/sh running `agent`) and the program beside it.
class SidecarPodTest : public LocalClusterTest {
 protected:
  Status RunPod(const std::string& agent, const std::string& program,
                std::map<std::string, std::string> program_env = {},
                const std::string& working_dir = "") {
    controller::UserProcess process;
    process.container = "trainer";
    process.argv = {"/bin/sh", "-c", program};
    program_env["RUN_DIR"] = run_dir_;
    process.env = program_env;
    process.working_dir = working_dir;
    ReplicaLaunch launch{kWorker, "sh", {"-c", agent}, {{"RUN_DIR", run_dir_}}};
    launch.user_process = process;
    return cluster_->Create(launch);
  }
};

TEST_F(SidecarPodTest, TheProgramRunsBesideItsAgentInAFreshSharedFolder) {
  const std::string socket_dir = cluster_->SocketDir(kWorker);
  EXPECT_EQ(socket_dir, run_dir_ + "/worker-0");
  std::filesystem::create_directories(socket_dir);
  std::ofstream(socket_dir + "/agent.json") << "{}";  // left by an earlier pod
  ASSERT_TRUE(
      RunPod("echo \"$KUBEPS_SOCKET_DIR\" > \"$KUBEPS_SOCKET_DIR/agent-saw\"; exec sleep 60",
             "while [ ! -e \"$KUBEPS_SOCKET_DIR/agent-saw\" ]; do sleep 0.01; done; "
             "ls \"$KUBEPS_SOCKET_DIR\" > \"$RUN_DIR/listing\"; "
             "echo \"$KUBEPS_SOCKET_DIR $GREETING\" > \"$RUN_DIR/program-saw\"",
             {{"GREETING", "hello"}})
          .ok());
  const pid_t agent = cluster_->AgentPid(kWorker);
  EXPECT_GT(agent, 0);
  EXPECT_GT(cluster_->Pid(kWorker), 0);
  EXPECT_NE(cluster_->Pid(kWorker), agent);
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kSucceeded)
      << "the program's exit, not the agent's SIGTERM";
  EXPECT_EQ(StatusOf(kWorker).exit_code, 0);
  EXPECT_EQ(ReadFile(run_dir_ + "/program-saw"), socket_dir + " hello\n");
  EXPECT_EQ(ReadFile(socket_dir + "/agent-saw"), socket_dir + "\n");
  EXPECT_EQ(ReadFile(run_dir_ + "/listing"), "agent-saw\n") << "the earlier pod's files are gone";
  EXPECT_FALSE(Exists(agent)) << "the agent is stopped once its program has ended";
}

TEST_F(SidecarPodTest, TheAgentIsSignalledAsSoonAsItsProgramHasEnded) {
  // As the kubelet ends a native sidecar: no grace for it to leave by itself.
  // The program ends once the agent listens for the signal (a SIGTERM before
  // its shell has set the trap would kill it without a trace: a flake).
  ASSERT_TRUE(RunPod("trap 'touch \"$RUN_DIR/agent-got-term\"; exit 0' TERM; "
                     "touch \"$RUN_DIR/agent-ready\"; while :; do sleep 0.01; done",
                     "while [ ! -e \"$RUN_DIR/agent-ready\" ]; do sleep 0.01; done; exit 0")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kSucceeded);
  EXPECT_TRUE(std::filesystem::exists(run_dir_ + "/agent-got-term"));
  EXPECT_EQ(cluster_->AgentRestarts(kWorker), 0);
}

TEST_F(SidecarPodTest, AnAgentThatExitsZeroIsDoneNotDead) {
  ASSERT_TRUE(RunPod("exit 0", "while [ ! -e \"$RUN_DIR/go\" ]; do sleep 0.01; done; exit 0").ok());
  ASSERT_TRUE(Eventually([&] {
    cluster_->List();
    return cluster_->AgentPid(kWorker) <= 0;
  }));
  std::ofstream(run_dir_ + "/go").put('\n');
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kSucceeded);
  EXPECT_EQ(cluster_->AgentRestarts(kWorker), 0) << "an agent that exits 0 is done, not dead";
}

TEST_F(SidecarPodTest, AFailedProgramFailsThePodWithItsExitCode) {
  ASSERT_TRUE(RunPod("exec sleep 60", "exit 3").ok());
  const pid_t agent = cluster_->AgentPid(kWorker);
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kFailed);
  EXPECT_EQ(StatusOf(kWorker).exit_code, 3);
  EXPECT_FALSE(Exists(agent));

  // The run policy's restart starts both again, as a new pod.
  ASSERT_TRUE(RunPod("exec sleep 60", "kill -9 $$").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).exit_code, 128 + SIGKILL);
  EXPECT_EQ(StatusOf(kWorker).restarts, 1);
}

TEST_F(SidecarPodTest, AnAgentThatDiesIsRestartedAloneWhileTheProgramRuns) {
  ASSERT_TRUE(RunPod("exec sleep 60", "exec sleep 60").ok());
  const pid_t program = cluster_->Pid(kWorker);
  const pid_t agent = cluster_->AgentPid(kWorker);
  ::kill(agent, SIGKILL);
  ASSERT_TRUE(Eventually([&] {
    cluster_->List();
    return cluster_->AgentPid(kWorker) > 0 && cluster_->AgentPid(kWorker) != agent;
  }));
  EXPECT_EQ(cluster_->AgentRestarts(kWorker), 1);
  EXPECT_EQ(cluster_->Pid(kWorker), program) << "the program keeps running";
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kRunning);
  EXPECT_EQ(StatusOf(kWorker).restarts, 0) << "a sidecar's restart is not the pod's";

  ASSERT_TRUE(cluster_->Delete(kWorker).ok());
  EXPECT_FALSE(Exists(program));
}

TEST_F(SidecarPodTest, TheProgramsOutputCarriesTheReplicasTag) {
  const std::string captured = run_dir_ + "/stdout";
  const int saved = ::dup(STDOUT_FILENO);
  const int file = ::open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(file, STDOUT_FILENO);
  Status started = RunPod("exec sleep 60", "echo first; printf 'second\\nno newline'");
  const bool copied =
      Eventually([&] { return ReadFile(captured).find("no newline\n") != std::string::npos; });
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(file);
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(copied) << ReadFile(captured);
  EXPECT_EQ(ReadFile(captured),
            "[worker-0/trainer] first\n[worker-0/trainer] second\n[worker-0/trainer] no newline\n");
}

TEST_F(SidecarPodTest, AProgramThatCannotRunFailsCreateWithTheReason) {
  controller::UserProcess process;
  process.container = "trainer";
  process.argv = {"no-such-program-of-kubeps"};
  ReplicaLaunch launch{kWorker, "sh", {"-c", "exec sleep 60"}, {}};
  launch.user_process = process;
  Status s = cluster_->Create(launch);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("the command of container trainer cannot run "
                                                "here: no-such-program-of-kubeps is not on PATH"));
  EXPECT_EQ(cluster_->AgentPid(kWorker), -1) << "nothing was started";

  Status missing_dir = RunPod("exec sleep 60", "exit 0", {}, "/no/such/folder");
  EXPECT_THAT(missing_dir.message(),
              ::testing::HasSubstr("the workingDir of container trainer, /no/such/folder, is not "
                                   "a folder on this machine"));
}

TEST_F(SidecarPodTest, TheProgramRunsInItsWorkingDirectory) {
  std::filesystem::create_directories(run_dir_ + "/app");
  ASSERT_TRUE(RunPod("exec sleep 60", "pwd > \"$RUN_DIR/pwd\"", {}, run_dir_ + "/app").ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(ReadFile(run_dir_ + "/pwd"), run_dir_ + "/app\n");
}

// A Unix socket's path holds at most 107 bytes: a job run from a deep folder
// still gets a socket its agent can bind (the CI's test folders were deep
// enough that every agent failed to bind, and was restarted without end).
TEST_F(SidecarPodTest, ARunFolderTooDeepForTheSocketSharesAShortFolderInstead) {
  const std::string deep_run_dir = run_dir_ + "/" + std::string(100, 'd');
  std::filesystem::create_directories(deep_run_dir);
  cluster_ = std::make_unique<LocalCluster>("/bin", deep_run_dir, /*grace_ms=*/5000);
  const std::string socket_dir = cluster_->SocketDir(kWorker);
  EXPECT_NE(socket_dir.rfind(deep_run_dir, 0), 0u) << socket_dir;
  EXPECT_LE(socket_dir.size() + std::strlen("/agent.sock"), kMaxSocketPathBytes) << socket_dir;
  ASSERT_TRUE(RunPod("exec python3 -c 'import os, socket, time\n"
                     "d = os.environ[\"KUBEPS_SOCKET_DIR\"]\n"
                     "socket.socket(socket.AF_UNIX).bind(d + \"/agent.sock\")\n"
                     "open(d + \"/bound\", \"w\").close()\n"
                     "time.sleep(60)'",
                     "while [ ! -e \"$KUBEPS_SOCKET_DIR/bound\" ]; do sleep 0.01; done; "
                     "echo \"$KUBEPS_SOCKET_DIR\" > \"$RUN_DIR/program-saw\"")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Ended(kWorker); }));
  EXPECT_EQ(StatusOf(kWorker).phase, ReplicaPhase::kSucceeded);
  EXPECT_EQ(ReadFile(run_dir_ + "/program-saw"), socket_dir + "\n");
  EXPECT_EQ(cluster_->AgentRestarts(kWorker), 0) << "the agent bound its socket at once";
  cluster_.reset();
  const std::string short_folder = std::filesystem::path(socket_dir).parent_path();
  EXPECT_FALSE(std::filesystem::exists(short_folder)) << "the short folder goes with the cluster";
}

TEST_F(SidecarPodTest, NeitherProcessOutlivesTheCluster) {
  ASSERT_TRUE(RunPod("exec sleep 60", "exec sleep 60").ok());
  const pid_t program = cluster_->Pid(kWorker);
  const pid_t agent = cluster_->AgentPid(kWorker);
  cluster_.reset();
  EXPECT_FALSE(Exists(program));
  EXPECT_FALSE(Exists(agent));
}

}  // namespace
}  // namespace kubeps::local
