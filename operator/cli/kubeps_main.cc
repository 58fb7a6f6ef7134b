// kubeps: the command line.
//   kubeps run JOB.yaml            run the job on this machine (embedded default)
//   kubeps train-local JOB.yaml    the job's model in one process, no parameter
//                                  servers, same global batch (the baseline)
//   kubeps validate JOB.yaml       check a manifest; names every bad field
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/node_config.h"
#include "operator/api/training_job.h"
#include "operator/local/local_runner.h"

namespace kubeps {
namespace {

constexpr const char* kUsage =
    "usage: kubeps COMMAND JOB.yaml [--run-dir=DIR]\n"
    "\n"
    "commands:\n"
    "  run JOB.yaml          run a TrainingJob on this machine: one scheduler, its\n"
    "                        parameter servers and workers as local processes\n"
    "  train-local JOB.yaml  train the job's model in this one process without\n"
    "                        parameter servers (global batch = batchSize x workers)\n"
    "  validate JOB.yaml     check a TrainingJob manifest without running it\n";

// The folder of this executable: kubeps-server and kubeps-agent live there.
std::string BinaryDir() {
  char path[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string full(path);
  return full.substr(0, full.rfind('/'));
}

bool LoadJob(const std::string& path, api::TrainingJob* job) {
  api::ParseResult result = api::ParseTrainingJobFile(path);
  if (!result.ok()) {
    PrintError(result.ErrorReport(path));
    return false;
  }
  *job = *result.job;
  return true;
}

int Validate(const std::string& path) {
  api::TrainingJob job;
  if (!LoadJob(path, &job)) return 1;
  PrintLine(path + ": valid TrainingJob \"" + job.name + "\"");
  return 0;
}

int Run(const std::string& path, const std::string& run_dir) {
  api::TrainingJob job;
  if (!LoadJob(path, &job)) return 1;
  return local::RunLocally(job, local::LocalRunOptions{BinaryDir(), run_dir, 0});
}

// Hands over to kubeps-agent in its single-process mode.
int TrainLocal(const std::string& path) {
  api::TrainingJob job;
  if (!LoadJob(path, &job)) return 1;
  const std::string agent = BinaryDir() + "/kubeps-agent";
  ::setenv(env::kRole, "local", 1);
  ::setenv(env::kJob, api::ToJson(job).dump().c_str(), 1);
  ::setenv(env::kJobName, job.name.c_str(), 1);
  if (!std::getenv(env::kBlasThreads)) {
    ::setenv(env::kBlasThreads, std::to_string(std::max(1u, std::thread::hardware_concurrency())).c_str(), 1);
  }
  char* argv[] = {const_cast<char*>(agent.c_str()), nullptr};
  ::execv(agent.c_str(), argv);
  PrintError("cannot execute " + agent + ": " + std::strerror(errno));
  return 1;
}

}  // namespace
}  // namespace kubeps

int main(int argc, char** argv) {
  using namespace kubeps;
  SetLogTag("kubeps");
  if (argc < 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::string path = argv[2];
  std::string run_dir;
  for (int i = 3; i < argc; ++i) {
    if (std::strncmp(argv[i], "--run-dir=", 10) == 0) {
      run_dir = argv[i] + 10;
    } else {
      PrintError(std::string("unknown option ") + argv[i] + "\n" + kUsage);
      return 2;
    }
  }
  if (command == "validate") return Validate(path);
  if (command == "run") return Run(path, run_dir);
  if (command == "train-local") return TrainLocal(path);
  PrintError("unknown command \"" + command + "\"\n" + kUsage);
  return 2;
}
