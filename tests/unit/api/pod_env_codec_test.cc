// The pod-environment codec (api/pod_env_codec.h): what the runner and the
// operator encode, every node decodes to the same values; a flag wins over
// its variable; bad values are refused with the variable's name.
#include "api/pod_env_codec.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

namespace kubeps::api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every KUBEPS_* variable the codec reads, cleared for each test and set
// from an encoded map, as a pod's environment would be.
class PodEnvCodecTest : public ::testing::Test {
 protected:
  PodEnvCodecTest() { ClearEnvironment(); }
  ~PodEnvCodecTest() override { ClearEnvironment(); }

  static void ClearEnvironment() {
    for (const char* name :
         {env::kRole, env::kJobName, env::kJob, env::kNodeId, env::kSchedulerAddr, env::kPodIp,
          env::kPort, env::kMetricsPort, env::kNumServers, env::kNumWorkers, env::kResendTimeoutMs,
          env::kMaxResends, env::kTokenFile, env::kRunDir, env::kBlasThreads, env::kCheckpointDir,
          env::kHolderGraceSeconds}) {
      ::unsetenv(name);
    }
  }
  static void Export(const std::map<std::string, std::string>& variables) {
    for (const auto& [name, value] : variables) ::setenv(name.c_str(), value.c_str(), 1);
  }
  // Parses `args` (flags) over the environment, as a node's main() does.
  // Returns the parse error's text, "" when it parsed.
  static std::string Decode(std::vector<std::string> args, NodeConfig* config) {
    CLI::App app{"node"};
    AddNodeFlags(&app, config);
    std::vector<char*> argv{const_cast<char*>("node")};
    for (auto& arg : args) argv.push_back(arg.data());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  }

  static TrainingJob Job() {
    ParseResult parsed = ParseTrainingJob(R"(
apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mnist, namespace: team-a}
spec:
  dataset: {path: /data}
  mode: async
  resendTimeoutMs: 250
  maxResends: 4
  checkpoint: {path: /ckpt}
  optimizer:
    name: adam
    learningRate: 0.001
    schedule: {warmupSteps: 50, decay: linear, decaySteps: 450, minLearningRate: 0.0001}
  replicaSpecs: {ps: {replicas: 3}, worker: {replicas: 5}}
)");
    EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
    return *parsed.job;
  }
};

TEST_F(PodEnvCodecTest, WhatIsEncodedDecodesToTheSameValues) {
  TrainingJob job = Job();
  job.uid = "6f1c2a9e-3b7d-4c1e-9a55-0d2e8f4b7c31";  // the operator's: the TrainingJob's UID
  Export(EncodePodEnv(job, "worker", "worker-3", "mnist-scheduler.team-a.svc:7000"));
  NodeConfig config;
  ASSERT_EQ(Decode({}, &config), "");
  EXPECT_EQ(config.role, "worker");
  EXPECT_EQ(config.job_name, "mnist");
  EXPECT_EQ(config.node_id, "worker-3");
  EXPECT_EQ(config.scheduler_address, "mnist-scheduler.team-a.svc:7000");
  EXPECT_EQ(config.num_servers, 3);
  EXPECT_EQ(config.num_workers, 5);
  EXPECT_EQ(config.resend_timeout_ms, 250);
  EXPECT_EQ(config.max_resends, 4);
  EXPECT_EQ(config.checkpoint_dir, "/ckpt");
  EXPECT_EQ(config.run_id, job.uid);
  // What the caller did not set keeps its default.
  EXPECT_EQ(config.pod_ip, "127.0.0.1");
  EXPECT_EQ(config.port, 0);

  TrainingJob decoded;
  ASSERT_TRUE(DecodeJob(config.job_json, &decoded).ok());
  EXPECT_EQ(ToJson(decoded), ToJson(job));
  EXPECT_EQ(decoded.spec.optimizer.learning_rate, 0.001);
  const OptimizerConfig optimizer = ToOptimizerConfig(decoded.spec.optimizer);
  EXPECT_EQ(optimizer.name, "adam");
  EXPECT_FLOAT_EQ(optimizer.learning_rate, 0.001f);
  EXPECT_EQ(optimizer.schedule.warmup_steps, 50u);
  EXPECT_EQ(optimizer.schedule.decay, "linear");
  EXPECT_EQ(optimizer.schedule.decay_steps, 450u);
  EXPECT_FLOAT_EQ(optimizer.schedule.min_learning_rate, 0.0001f);
}

// How long a server waits for another job's process to let go of its
// checkpoint folder: the server pods' grace period (Kubernetes' 30 s unless
// the ps template sets one) and 10 s.
TEST_F(PodEnvCodecTest, AServerWaitsForAnotherJobsHolderItsPodsGracePeriodAndTenSeconds) {
  TrainingJob job = Job();
  NodeConfig config;
  Export(EncodePodEnv(job, "server", "server-0", "mnist-scheduler.team-a.svc:7000"));
  ASSERT_EQ(Decode({}, &config), "");
  EXPECT_EQ(config.holder_grace_seconds, 40);
  job.spec.ps.template_override = {{"spec", {{"terminationGracePeriodSeconds", 120}}}};
  Export(EncodePodEnv(job, "server", "server-0", "mnist-scheduler.team-a.svc:7000"));
  ASSERT_EQ(Decode({}, &config), "");
  EXPECT_EQ(config.holder_grace_seconds, 130);
  EXPECT_EQ(EncodePodEnv(job, "worker", "worker-0", "s:1").count(env::kHolderGraceSeconds), 0u);
}

TEST_F(PodEnvCodecTest, AFlagWinsOverItsVariable) {
  Export({{env::kSchedulerAddr, "from-env:1"}, {env::kNumWorkers, "2"}, {env::kRole, "server"}});
  NodeConfig config;
  ASSERT_EQ(Decode({"--scheduler-addr=from-flag:2", "--num-workers", "7"}, &config), "");
  EXPECT_EQ(config.scheduler_address, "from-flag:2");
  EXPECT_EQ(config.num_workers, 7);
  EXPECT_EQ(config.role, "server") << "variables without a flag still count";
}

TEST_F(PodEnvCodecTest, BadNumbersAreRefusedNamingTheVariable) {
  struct Case {
    const char* variable;
    const char* value;
  };
  for (const Case& bad :
       {Case{env::kNumWorkers, "many"}, Case{env::kNumWorkers, "0"}, Case{env::kNumServers, "-1"},
        Case{env::kPort, "-5"}, Case{env::kResendTimeoutMs, "0"}, Case{env::kMaxResends, "1.5"}}) {
    ClearEnvironment();
    ::setenv(bad.variable, bad.value, 1);
    NodeConfig config;
    const std::string error = Decode({}, &config);
    EXPECT_THAT(error, HasSubstr(bad.variable)) << bad.variable << "=" << bad.value;
  }
  ClearEnvironment();
  ::setenv(env::kNumWorkers, "many", 1);
  NodeConfig bad;
  EXPECT_THAT(Decode({}, &bad), HasSubstr("KUBEPS_NUM_WORKERS (or --num-workers) must be an "
                                          "integer >= 1, got \"many\""));
  ClearEnvironment();
  ::setenv(env::kMaxResends, "0", 1);  // zero resends is allowed: a single attempt
  NodeConfig config;
  EXPECT_EQ(Decode({}, &config), "");
  EXPECT_EQ(config.max_resends, 0);
}

TEST_F(PodEnvCodecTest, TheTokenIsReadFromItsFile) {
  const std::string path = ::testing::TempDir() + "/pod_env_codec_token";
  std::ofstream(path) << "s3cret\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read);
  NodeConfig config;
  config.role = "server";
  config.token_file = path;
  Status s = FinishNodeConfig(&config);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NE(config.token, nullptr);
  EXPECT_EQ(config.token->Presented(), std::vector<std::string>{"s3cret"});
  EXPECT_EQ(config.node_id, "server-" + std::to_string(::getpid())) << "an anonymous node is named";
  std::filesystem::remove(path);
}

TEST_F(PodEnvCodecTest, AMissingTokenFileIsAnErrorNamingTheVariable) {
  NodeConfig config;
  config.token_file = "/nonexistent/token";
  Status s = FinishNodeConfig(&config);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(env::kTokenFile));
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/token"));
}

TEST_F(PodEnvCodecTest, ATokenFileOthersCanReadIsAnErrorNamingTheVariableAndTheMode) {
  const std::string path = ::testing::TempDir() + "/pod_env_codec_open_token";
  std::ofstream(path) << "s3cret\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write |
                                         std::filesystem::perms::others_read);
  NodeConfig config;
  config.token_file = path;
  Status s = FinishNodeConfig(&config);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), std::string(env::kTokenFile) + ": token file " + path +
                             ": mode 0604 lets other users read or change the job's token; make "
                             "it 0600 or 0400 (a Secret volume: defaultMode 0400)");
  EXPECT_THAT(s.message(), Not(HasSubstr("s3cret"))) << "the message never holds the token";
  std::filesystem::remove(path);
}

TEST_F(PodEnvCodecTest, ABadOrMissingJobIsAnErrorNamingTheVariable) {
  TrainingJob job;
  for (const std::string& text : {std::string(""), std::string("{not json"),
                                  std::string(R"({"apiVersion": "kubeps.io/v1alpha1"})")}) {
    Status s = DecodeJob(text, &job);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr(env::kJob)) << text;
  }
}

TEST_F(PodEnvCodecTest, PortsArePublishedWholeForTheLocalRunner) {
  const std::string dir = ::testing::TempDir() + "/pod_env_codec_ports";
  std::filesystem::create_directories(dir);
  NodeConfig config;
  config.node_id = "server-1";
  config.run_dir = dir;
  PublishPorts(config, 7001, 9101);
  std::ifstream in(dir + "/server-1.ports");
  std::string grpc, metrics;
  int grpc_port = 0, metrics_port = 0;
  in >> grpc >> grpc_port >> metrics >> metrics_port;
  EXPECT_EQ(grpc + " " + std::to_string(grpc_port), "grpc 7001");
  EXPECT_EQ(metrics + " " + std::to_string(metrics_port), "metrics 9101");
  EXPECT_FALSE(std::filesystem::exists(dir + "/server-1.ports.tmp"));
  std::filesystem::remove_all(dir);

  config.run_dir = "";
  PublishPorts(config, 1, 2);  // no run folder: nothing to write, no crash
}

// The ranks an elastic job's scheduler says compute its newest step, as the
// local runner reads them back; none before it has said, or where the file
// holds anything else.
TEST(PublishComputingWorkersTest, TheRunnerReadsBackWhatTheSchedulerWrote) {
  const std::string dir = ::testing::TempDir() + "/pod_env_codec_computing";
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(ReadComputingWorkers(dir).has_value());
  PublishComputingWorkers(dir, {0, 1, 3});
  EXPECT_EQ(ReadComputingWorkers(dir), (std::vector<int>{0, 1, 3}));
  PublishComputingWorkers(dir, {});
  EXPECT_EQ(ReadComputingWorkers(dir), std::vector<int>{});
  std::ofstream(dir + "/" + kComputingWorkersName) << "0 one\n";
  EXPECT_FALSE(ReadComputingWorkers(dir).has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubeps::api
