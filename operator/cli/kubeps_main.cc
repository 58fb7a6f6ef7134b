// kubeps: the command line.
//   kubeps run JOB.yaml            run the job on this machine (embedded default)
//   kubeps train-local JOB.yaml    the job's model in one process, no parameter
//                                  servers, same global batch (the baseline)
//   kubeps validate JOB.yaml       check a manifest; names every bad field
//   kubeps scale JOB --workers=N   scale the workers of a running elastic job
//   kubeps reshard JOB.yaml        cut a job's checkpoints for its number of servers
//                                  (or --path DIR --servers N, without a manifest)
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "api/pod_env_codec.h"
#include "api/training_job.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "operator/local/local_runner.h"
#include "operator/local/local_scale.h"

namespace kubeps {
namespace {

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

int Run(const std::string& path, const std::string& run_dir, bool keep_run_dir,
        const std::string& host) {
  api::TrainingJob job;
  if (!LoadJob(path, &job)) return 1;
  // A job's own program runs in the manifest's folder (or its workingDir,
  // taken from there), wherever `kubeps run` was started.
  std::error_code error;
  const std::string manifest_dir =
      std::filesystem::absolute(path, error).parent_path().lexically_normal().string();
  return local::RunLocally(
      job, local::LocalRunOptions{BinaryDir(), run_dir, 0, manifest_dir, keep_run_dir, host});
}

// Hands over to kubeps-agent in its single-process mode.
int TrainLocal(const std::string& path) {
  api::TrainingJob job;
  if (!LoadJob(path, &job)) return 1;
  if (job.spec.brings_own_program()) {
    PrintError(path +
               ": train-local trains one of kubeps' built-in models (spec.model), and job \"" +
               job.name + "\" brings its own program: run that program yourself, or the job " +
               "with kubeps run");
    return 1;
  }
  const std::string agent = BinaryDir() + "/kubeps-agent";
  ::setenv(api::env::kRole, "local", 1);
  ::setenv(api::env::kJob, api::ToJson(job).dump().c_str(), 1);
  ::setenv(api::env::kJobName, job.name.c_str(), 1);
  char* argv[] = {const_cast<char*>(agent.c_str()), nullptr};
  ::execv(agent.c_str(), argv);
  PrintError("cannot execute " + agent + ": " + std::strerror(errno));
  return 1;
}

int Scale(const std::string& job_name, int workers, std::optional<uint64_t> at_step,
          const std::string& run_dir) {
  std::string used;
  if (Status s = local::ScaleLocalJob(job_name, workers, at_step, run_dir, &used); !s.ok()) {
    PrintError("kubeps scale: " + s.message());
    return 1;
  }
  PrintLine("job " + job_name + " scaled to " + std::to_string(workers) + " workers (" + used +
            ")");
  return 0;
}

// Where and for what `kubeps reshard` cuts the checkpoints: a manifest's
// (the job to run next), or flags, where no manifest is at hand; a flag
// overrides the manifest.
struct ReshardTarget {
  std::string folder;
  int servers = 0;
  int64_t big_array_bound = 0;
};

// Hands over to kubeps-reshard (tools/: it reads the servers' checkpoints
// and places tensors as the workers do, which this CLI links neither of).
int Reshard(const std::string& path, const std::string& run_dir, ReshardTarget target) {
  if (!path.empty()) {
    api::TrainingJob job;
    if (!LoadJob(path, &job)) return 1;
    if (target.folder.empty()) target.folder = job.spec.checkpoint_path;
    if (target.folder.empty() && !run_dir.empty()) target.folder = run_dir + "/checkpoints";
    if (target.servers == 0) target.servers = job.spec.ps.replicas;
    if (target.big_array_bound == 0) target.big_array_bound = job.spec.big_array_bound;
  }
  if (target.folder.empty() || target.servers == 0) {
    PrintError("kubeps reshard: " +
               (path.empty() ? std::string("give a manifest (JOB.yaml), or --path and --servers")
                             : path + ": spec.checkpoint.path is empty: give the run folder "
                                      "its checkpoints are in (--run-dir, as the job was run "
                                      "with), or --path"));
    return 1;
  }
  const std::string tool = BinaryDir() + "/kubeps-reshard";
  std::vector<std::string> args = {tool, "--path", target.folder, "--servers",
                                   std::to_string(target.servers)};
  if (target.big_array_bound > 0)
    args.insert(args.end(), {"--big-array-bound", std::to_string(target.big_array_bound)});
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::execv(tool.c_str(), argv.data());
  PrintError("cannot execute " + tool + ": " + std::strerror(errno));
  return 1;
}

}  // namespace
}  // namespace kubeps

int main(int argc, char** argv) {
  using namespace kubeps;
  SetLogTag("kubeps");
  CLI::App app{"kubeps: TrainingJobs on this machine"};
  app.require_subcommand(1);
  std::string path, run_dir;
  CLI::App* run = app.add_subcommand("run",
                                     "run a TrainingJob on this machine: one scheduler, its "
                                     "parameter servers and workers as local processes");
  run->add_option("JOB.yaml", path, "the TrainingJob manifest")->required();
  run->add_option("--run-dir", run_dir,
                  "folder for logs, ports and checkpoints (default: a new one under $TMPDIR, "
                  "removed after a successful job)");
  bool keep_run_dir = false;
  run->add_flag("--keep-run-dir", keep_run_dir,
                "keep the new run folder after a successful job (a failed job's is always kept)");
  std::string host = "127.0.0.1";
  run->add_option("--host", host,
                  "loopback address every replica listens on and reports as its pod IP: "
                  "127.0.0.1, or ::1 to run the job over IPv6")
      ->capture_default_str();
  CLI::App* train_local =
      app.add_subcommand("train-local",
                         "train the job's model in this one process without parameter servers "
                         "(global batch = batchSize x workers)");
  train_local->add_option("JOB.yaml", path, "the TrainingJob manifest")->required();
  CLI::App* validate =
      app.add_subcommand("validate", "check a TrainingJob manifest without running it");
  validate->add_option("JOB.yaml", path, "the TrainingJob manifest")->required();
  CLI::App* scale = app.add_subcommand(
      "scale", "change the number of workers of a running kubeps run of an elastic job");
  std::string job_name;
  int workers = 0;
  scale->add_option("JOB", job_name, "the TrainingJob's name")->required();
  scale->add_option("--workers", workers, "how many workers it should have")
      ->required()
      ->check(CLI::PositiveNumber);
  std::optional<uint64_t> at_step;
  scale->add_option("--at-step", at_step,
                    "change the workers at this step exactly (the job waits there for workers not "
                    "up yet); default: at the first step no worker has reached");
  scale->add_option("--run-dir", run_dir, "the run folder the job was started with, if any");
  CLI::App* reshard = app.add_subcommand(
      "reshard",
      "cut the checkpoints of an earlier run for the manifest's number of parameter servers "
      "and bigArrayBound, so that the job resumes from them (no job may run on them)");
  reshard->add_option("JOB.yaml", path, "the TrainingJob manifest to run next");
  reshard->add_option("--run-dir", run_dir,
                      "the run folder the earlier run was given, where spec.checkpoint.path is "
                      "empty");
  ReshardTarget target;
  reshard->add_option("--path", target.folder,
                      "the checkpoint folder (spec.checkpoint.path: its server-<i> folders); "
                      "default: the manifest's");
  reshard
      ->add_option("--servers", target.servers,
                   "how many parameter servers the next run has; default: the manifest's")
      ->check(CLI::PositiveNumber);
  reshard
      ->add_option("--big-array-bound", target.big_array_bound,
                   "the next run's spec.bigArrayBound; default: the manifest's, or 1000000")
      ->check(CLI::PositiveNumber);
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;

  if (validate->parsed()) return Validate(path);
  if (run->parsed()) return Run(path, run_dir, keep_run_dir, host);
  if (scale->parsed()) return Scale(job_name, workers, at_step, run_dir);
  if (reshard->parsed()) return Reshard(path, run_dir, target);
  return TrainLocal(path);
}
