#include "operator/local/local_scale.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "api/pod_env_codec.h"
#include "common/desired_workers.h"

namespace kubeps::local {
namespace {

constexpr const char* kPidName = "runner.pid";
constexpr const char* kJobName = "job.json";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Atomically: a reader sees the old text or the new one, never a part.
Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    if (!out.flush()) return Status::Error("cannot write " + temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) return Status::Error("cannot write " + path + ": " + error.message());
  return Status::Ok();
}

// Whether `dir` holds a run whose runner is alive.
bool LiveRun(const std::string& dir) {
  const std::string pid_text = ReadAll(dir + "/" + kPidName);
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

Status FindRunDir(const std::string& job_name, std::string* found) {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path root(tmp ? tmp : "/tmp");
  const std::string prefix = "kubeps-" + job_name + "-";
  std::vector<std::string> live;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (LiveRun(entry.path().string())) live.push_back(entry.path().string());
  }
  if (live.empty()) {
    return Status::Error("no running job " + job_name + " under " + root.string() +
                         " (kubeps run of it; for one started with --run-dir, pass the same "
                         "--run-dir)");
  }
  if (live.size() > 1) {
    return Status::Error("several running jobs named " + job_name + " (" + live[0] + ", " +
                         live[1] + "): say which with --run-dir");
  }
  *found = live[0];
  return Status::Ok();
}

}  // namespace

Status WriteRunFiles(const std::string& run_dir, const api::TrainingJob& job) {
  // A number an earlier run of the folder was scaled to is not this run's:
  // it starts with the manifest's replicas, and its workers with none
  // computing until its scheduler says.
  std::error_code ignored;
  std::filesystem::remove(run_dir + "/" + kDesiredWorkersName, ignored);
  std::filesystem::remove(run_dir + "/" + api::kComputingWorkersName, ignored);
  if (Status s = WriteAtomically(run_dir + "/" + kJobName, api::ToJson(job).dump()); !s.ok())
    return s;
  return WriteAtomically(run_dir + "/" + kPidName, std::to_string(::getpid()) + "\n");
}

Status ScaleLocalJob(const std::string& job_name, int workers, std::optional<uint64_t> at_step,
                     const std::string& run_dir, std::string* run_dir_used) {
  std::string dir = run_dir;
  if (dir.empty()) {
    if (Status s = FindRunDir(job_name, &dir); !s.ok()) return s;
  } else if (!LiveRun(dir)) {
    return Status::Error(dir + " holds no running job (no " + std::string(kPidName) +
                         " of a live kubeps run)");
  }
  api::TrainingJob job;
  if (Status s = api::DecodeJob(ReadAll(dir + "/" + kJobName), &job); !s.ok())
    return Status::Error(dir + "/" + kJobName + ": " + s.message());
  if (job.name != job_name)
    return Status::Error(dir + " runs job " + job.name + ", not " + job_name);
  const api::ElasticPolicy& policy = job.spec.elastic;
  if (!policy.enabled()) {
    return Status::Error("job " + job_name +
                         " has fixed workers: give it spec.replicaSpecs.worker.elasticPolicy "
                         "{minReplicas, maxReplicas} to scale it while it runs");
  }
  if (workers < policy.min_replicas || workers > policy.max_replicas) {
    return Status::Error("--workers " + std::to_string(workers) + " is outside job " + job_name +
                         "'s elasticPolicy [" + std::to_string(policy.min_replicas) + ", " +
                         std::to_string(policy.max_replicas) + "]");
  }
  *run_dir_used = dir;
  return WriteAtomically(dir + "/" + kDesiredWorkersName,
                         FormatDesiredWorkers({workers, at_step}) + "\n");
}

}  // namespace kubeps::local
