// `kubeps run` (operator/local/local_runner.h) with stand-in binaries: shell
// scripts named kubeps-server and kubeps-agent that publish a port, record
// their environment and exit as the test says. The job logic itself is
// tested in tests/unit/operator/controller; this is the runner around it.
#include "operator/local/local_runner.h"

#include <signal.h>
#include <sys/stat.h>
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

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every node publishes its ports and its environment. The scheduler and the
// servers end as when told the job is over, as the real ones do: once both
// workers have finished (a worker that exits 0 leaves a .done file), their
// exit possibly seen before the workers'. Stopped before that, they exit 143.
constexpr char kServerScript[] = R"sh(#!/bin/sh
env > "$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.env"
printf 'grpc 45678\nmetrics 0\n' > "$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.ports"
trap 'exit 143' TERM INT
while [ "$(ls "$KUBEPS_RUN_DIR"/worker-*.done 2>/dev/null | wc -l)" -lt 2 ];
do sleep 0.02; done
echo "JobOver: every worker finished" > "$KUBEPS_TERMINATION_LOG"
exit 0
)sh";

class LocalRunnerTest : public ::testing::Test {
 protected:
  LocalRunnerTest()
      : dir_(::testing::TempDir() + "local_runner_test_" + std::to_string(::getpid())) {
    std::filesystem::create_directories(dir_ + "/bin");
    options_.bin_dir = dir_ + "/bin";
    options_.run_dir = dir_ + "/run";
    options_.cores = 4;
    WriteScript("kubeps-server", kServerScript);
    SetWorker("exit 0");
  }
  ~LocalRunnerTest() override { std::filesystem::remove_all(dir_); }

  void WriteScript(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/bin/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0755);
  }
  // The agent records its environment, then runs `body`; one that exits 0
  // has finished, as the scheduler hears.
  void SetWorker(const std::string& body) {
    WriteScript("kubeps-agent",
                "#!/bin/sh\nenv > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.env\"\n"
                "trap '[ $? -eq 0 ] && touch \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.done\"' EXIT\n" +
                    body + "\n");
  }
  static api::TrainingJob Job(const std::string& run_policy = "{}") {
    api::ParseResult parsed = api::ParseTrainingJob(R"(
apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mnist}
spec:
  dataset: {path: /data}
  runPolicy: )" + run_policy + R"(
  replicaSpecs: {ps: {replicas: 1}, worker: {replicas: 2}}
)");
    EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
    return *parsed.job;
  }
  // The value of `variable` in what node `node` recorded.
  std::string EnvOf(const std::string& node, const std::string& variable) {
    std::istringstream lines(ReadFile(options_.run_dir + "/" + node + ".env"));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(variable + "=", 0) == 0) return line.substr(variable.size() + 1);
    }
    return "<unset>";
  }

  std::string dir_;
  LocalRunOptions options_;
};

TEST_F(LocalRunnerTest, AJobWhoseWorkersSucceedSucceeds) {
  EXPECT_EQ(RunLocally(Job(), options_), 0);
  EXPECT_EQ(EnvOf("worker-1", "KUBEPS_ROLE"), "worker");
  EXPECT_EQ(EnvOf("server-0", "KUBEPS_ROLE"), "server");
  EXPECT_EQ(EnvOf("scheduler-0", "KUBEPS_ROLE"), "scheduler");
}

// What only the local runner knows: loopback, any free port, the run folder,
// the token, and the machine's cores shared among the workers (and among the
// servers, for their updates).
TEST_F(LocalRunnerTest, NodesGetTheLocalEnvironment) {
  ASSERT_EQ(RunLocally(Job(), options_), 0);
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_SCHEDULER_ADDR"), "127.0.0.1:45678")
      << "the port the scheduler published";
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_POD_IP"), "127.0.0.1");
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_PORT"), "0");
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_RUN_DIR"), options_.run_dir);
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_BLAS_THREADS"), "2") << "4 cores, 2 workers";
  EXPECT_EQ(EnvOf("worker-0", "OMP_NUM_THREADS"), "2");
  // A sync job's server updates while the workers wait: its share of the cores.
  EXPECT_EQ(EnvOf("server-0", "KUBEPS_BLAS_THREADS"), "4") << "4 cores, 1 server";
  EXPECT_EQ(EnvOf("scheduler-0", "KUBEPS_BLAS_THREADS"), "1");
  EXPECT_EQ(EnvOf("server-0", "KUBEPS_CHECKPOINT_DIR"), options_.run_dir + "/checkpoints");
  const std::string token_file = EnvOf("worker-0", "KUBEPS_TOKEN_FILE");
  struct stat info {};
  ASSERT_EQ(::stat(token_file.c_str(), &info), 0) << token_file;
  EXPECT_EQ(info.st_mode & 0777, 0600) << "only the job's own processes may read the token";
  EXPECT_EQ(ReadFile(token_file).size(), 33u) << "32 hex digits and a newline";
}

// Workers of one BLAS thread each keep every core busy: they push after the
// backward pass, unless a core is left for each server, or the runner's own
// environment says otherwise. Workers of several threads overlap.
TEST_F(LocalRunnerTest, WorkersOverlapTheExchangeUnlessTheirSingleThreadsFillEveryCore) {
  auto overlap_of_worker = [&](int cores, const std::string& run_dir) {
    options_.cores = cores;
    options_.run_dir = dir_ + "/" + run_dir;
    EXPECT_EQ(RunLocally(Job(), options_), 0);
    return EnvOf("worker-0", "KUBEPS_OVERLAP");
  };
  EXPECT_EQ(overlap_of_worker(2, "full"), "0") << "2 workers of 1 thread on 2 cores";
  EXPECT_EQ(EnvOf("server-0", "KUBEPS_OVERLAP"), "<unset>");
  EXPECT_EQ(overlap_of_worker(3, "spare"), "<unset>") << "a third core for the one server";
  EXPECT_EQ(overlap_of_worker(4, "threads"), "<unset>") << "2 workers of 2 threads";
  ::setenv("KUBEPS_OVERLAP", "1", 1);
  EXPECT_EQ(overlap_of_worker(2, "asked"), "1");
  ::unsetenv("KUBEPS_OVERLAP");
}

// `kubeps run --host=::1`: every replica listens on IPv6 loopback and
// reports it as its pod IP, as on a single-stack IPv6 cluster; the
// scheduler's address carries the brackets an IPv6 address needs.
TEST_F(LocalRunnerTest, ReplicasCanRunOnIpv6Loopback) {
  options_.host = "::1";
  ASSERT_EQ(RunLocally(Job(), options_), 0);
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_SCHEDULER_ADDR"), "[::1]:45678");
  EXPECT_EQ(EnvOf("worker-1", "KUBEPS_POD_IP"), "::1");
  EXPECT_EQ(EnvOf("server-0", "KUBEPS_POD_IP"), "::1");
  EXPECT_EQ(EnvOf("scheduler-0", "KUBEPS_POD_IP"), "::1");
  // Written in brackets, it is the same address.
  options_.host = "[::1]";
  ASSERT_EQ(RunLocally(Job(), options_), 0);
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_POD_IP"), "::1");
}

// A local run is for this machine: no replica listens beyond loopback.
TEST_F(LocalRunnerTest, OnlyALoopbackHostIsAccepted) {
  for (const std::string host : {"0.0.0.0", "::", "10.0.0.7", "fd00::7", "localhost", ""}) {
    options_.host = host;
    EXPECT_EQ(RunLocally(Job(), options_), 1) << host;
    EXPECT_EQ(EnvOf("worker-0", "KUBEPS_ROLE"), "<unset>") << host << ": no replica started";
  }
  options_.host = "127.0.0.2";  // all of 127/8 is loopback
  EXPECT_EQ(RunLocally(Job(), options_), 0);
}

TEST_F(LocalRunnerTest, AFailedWorkerUnderNeverFailsTheRun) {
  SetWorker("exit 3");
  EXPECT_EQ(RunLocally(Job("{restartPolicy: Never}"), options_), 1);
}

TEST_F(LocalRunnerTest, AFailedWorkerIsRestartedUnderOnFailure) {
  // Fails on its first run, succeeds on its second.
  SetWorker(
      "f=\"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.ran\"; [ -e \"$f\" ] && exit 0; touch \"$f\"; "
      "exit 1");
  EXPECT_EQ(RunLocally(Job("{restartPolicy: OnFailure, backoffLimit: 4}"), options_), 0);
}

// A job that brings its own program: `program` runs with /bin/sh beside
// each worker's stand-in agent, which waits for it to say "done".
api::TrainingJob OwnProgramJob(const std::string& program) {
  nlohmann::json job = {
      {"apiVersion", "kubeps.io/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "torch"}}},
      {"spec",
       {{"runPolicy", {{"restartPolicy", "OnFailure"}, {"backoffLimit", 4}}},
        {"replicaSpecs",
         {{"ps", {{"replicas", 1}}},
          {"worker",
           {{"replicas", 2},
            {"template",
             {{"spec",
               {{"containers",
                 {{{"name", "trainer"},
                   {"image", "registry.example/torch:1"},
                   {"command", {"/bin/sh", "-c", program}},
                   {"workingDir", "app"},
                   {"env", {{{"name", "GREETING"}, {"value", "hello"}}}}}}}}}}}}}}}}}};
  api::ParseResult parsed = api::ParseTrainingJob(job.dump());
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return parsed.job.value_or(api::TrainingJob{});
}

// Its program says finish by leaving `done` in the shared folder. Stopped
// after that (the runner stops an agent once its program has ended, and may
// before the agent has looked again), it ends as the real one does: its
// worker finished, which the stand-in servers wait for.
constexpr char kAgentWaitingForItsProgram[] =
    "echo \"$@\" > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.args\"\n"
    "trap '[ -e \"$KUBEPS_SOCKET_DIR/done\" ] && exit 0; exit 143' TERM\n"
    "while [ ! -e \"$KUBEPS_SOCKET_DIR/done\" ]; do sleep 0.01; done";

TEST_F(LocalRunnerTest, AJobsOwnProgramRunsBesideEachWorkersAgent) {
  SetWorker(kAgentWaitingForItsProgram);
  std::filesystem::create_directories(dir_ + "/manifests/app");
  options_.program_dir = dir_ + "/manifests";
  ASSERT_EQ(RunLocally(OwnProgramJob("env > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.program.env\"; "
                                     "pwd > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.pwd\"; "
                                     "touch \"$KUBEPS_SOCKET_DIR/done\""),
                       options_),
            0);
  EXPECT_EQ(ReadFile(options_.run_dir + "/worker-1.args"), "--serve\n");
  EXPECT_EQ(ReadFile(options_.run_dir + "/worker-1.pwd"), dir_ + "/manifests/app\n")
      << "workingDir, from the manifest's folder";
  const std::string socket_dir = options_.run_dir + "/worker-1";
  EXPECT_EQ(EnvOf("worker-1", "KUBEPS_SOCKET_DIR"), socket_dir);
  EXPECT_EQ(EnvOf("worker-1", "KUBEPS_BLAS_THREADS"), "1") << "the agent does no math";
  EXPECT_EQ(EnvOf("worker-1.program", "KUBEPS_SOCKET_DIR"), socket_dir);
  EXPECT_EQ(EnvOf("worker-1.program", "KUBEPS_NODE_ID"), "worker-1");
  EXPECT_EQ(EnvOf("worker-1.program", "KUBEPS_RUN_DIR"), options_.run_dir);
  EXPECT_EQ(EnvOf("worker-1.program", "GREETING"), "hello");
  EXPECT_EQ(EnvOf("worker-1.program", "OMP_NUM_THREADS"), "2") << "4 cores, 2 programs";
  EXPECT_EQ(EnvOf("worker-1.program", "KUBEPS_OVERLAP"), "<unset>") << "2 threads each";
  EXPECT_EQ(EnvOf("worker-1.program", "KUBEPS_TOKEN_FILE"), "<unset>")
      << "only the agent talks to the servers";
}

// The built-in trainer as the job's own program (kubeps-agent --connect)
// reads the same variable.
TEST_F(LocalRunnerTest, AJobsOwnProgramIsToldWhereItsExchangeGoesToo) {
  SetWorker(kAgentWaitingForItsProgram);
  std::filesystem::create_directories(dir_ + "/manifests/app");
  options_.program_dir = dir_ + "/manifests";
  options_.cores = 2;
  ASSERT_EQ(RunLocally(OwnProgramJob("env > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.program.env\"; "
                                     "touch \"$KUBEPS_SOCKET_DIR/done\""),
                       options_),
            0);
  EXPECT_EQ(EnvOf("worker-0.program", "KUBEPS_OVERLAP"), "0");
  EXPECT_EQ(EnvOf("worker-0", "KUBEPS_OVERLAP"), "<unset>") << "the agent does no math";
}

TEST_F(LocalRunnerTest, AFailedProgramIsRestartedWithItsAgent) {
  SetWorker(kAgentWaitingForItsProgram);
  std::filesystem::create_directories(dir_ + "/app");
  options_.program_dir = dir_;
  // Fails on its first run, succeeds on its second.
  ASSERT_EQ(RunLocally(OwnProgramJob("f=\"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.ran\"; "
                                     "[ -e \"$f\" ] || { touch \"$f\"; exit 1; }; "
                                     "touch \"$KUBEPS_SOCKET_DIR/done\""),
                       options_),
            0);
}

TEST_F(LocalRunnerTest, AProgramThatCannotRunFailsTheJobAtOnce) {
  SetWorker(kAgentWaitingForItsProgram);
  options_.program_dir = dir_ + "/no-such-folder";
  EXPECT_EQ(RunLocally(OwnProgramJob("exit 0"), options_), 1);
}

// Declared last: RunLocally's interrupt flag, once set, stays set in this
// process (ctest runs every test in a process of its own).
TEST_F(LocalRunnerTest, AnInterruptStopsEveryReplicaAndExits130) {
  SetWorker("echo $$ > \"$KUBEPS_RUN_DIR/$KUBEPS_NODE_ID.pid\"; exec sleep 60");
  std::thread interrupter([&] {
    auto started = [&] {
      return std::filesystem::exists(options_.run_dir + "/worker-0.pid") &&
             std::filesystem::exists(options_.run_dir + "/worker-1.pid");
    };
    for (auto waited = 0ms; waited < 30s && !started(); waited += 10ms)
      std::this_thread::sleep_for(10ms);
    ::kill(::getpid(), SIGINT);
  });
  EXPECT_EQ(RunLocally(Job(), options_), 130);
  interrupter.join();
  for (const char* worker : {"worker-0", "worker-1"}) {
    const pid_t pid = std::stoi(ReadFile(options_.run_dir + "/" + worker + ".pid"));
    EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << worker << " outlived the run";
  }
}

}  // namespace
}  // namespace kubeps::local
