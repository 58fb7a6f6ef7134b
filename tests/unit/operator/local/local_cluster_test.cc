// The local backend of the job logic (operator/local/local_cluster.h), with
// /bin/sh as the replica's binary: environment, exit codes and signals,
// restarts that keep their gRPC port, graceful then forced deletion, and
// children that never outlive the cluster.
#include "operator/local/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST_F(LocalClusterTest, ChildrenDoNotOutliveTheCluster) {
  ASSERT_TRUE(Run(kWorker, "exec sleep 60").ok());
  const pid_t pid = cluster_->Pid(kWorker);
  ASSERT_TRUE(Exists(pid));
  cluster_.reset();
  EXPECT_FALSE(Exists(pid));
}

}  // namespace
}  // namespace kubeps::local
