#include "operator/local/local_cluster.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace kubeps::local {

using controller::ReplicaName;
using controller::ReplicaPhase;

LocalCluster::LocalCluster(std::string bin_dir, std::string run_dir, int grace_ms)
    : bin_dir_(std::move(bin_dir)), run_dir_(std::move(run_dir)), grace_ms_(grace_ms) {}

LocalCluster::~LocalCluster() {
  for (auto& [name, process] : processes_) {
    if (process.pid > 0) ::kill(process.pid, SIGKILL), ::waitpid(process.pid, nullptr, 0);
  }
}

Status LocalCluster::Create(const controller::ReplicaLaunch& launch) {
  Process& process = processes_[launch.name];
  Reap(process);
  if (process.pid > 0) {
    return Status::Error(launch.name.ToString() + " is still running (pid " +
                         std::to_string(process.pid) + ")");
  }
  const bool restart =
      process.status.phase != ReplicaPhase::kPending || process.status.restarts > 0;
  if (restart) ++process.status.restarts;
  process.status.name = launch.name;
  process.status.phase = ReplicaPhase::kRunning;
  process.status.exit_code = 0;

  ReadPorts(launch.name, process);  // learn the old port before it is forgotten
  process.metrics_port = 0;         // a new process picks a new one
  // A re-created replica binds the port its peers already know.
  auto env = launch.env;
  if (process.grpc_port > 0) env["KUBEPS_PORT"] = std::to_string(process.grpc_port);
  ::unlink((run_dir_ + "/" + launch.name.ToString() + ".ports").c_str());

  const std::string path = bin_dir_ + "/" + launch.binary;
  std::vector<std::string> args{path};
  args.insert(args.end(), launch.args.begin(), launch.args.end());
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::Error("fork for " + launch.name.ToString() + " failed");
  if (pid == 0) {
    // Own process group: a Ctrl-C reaches the runner, which stops children
    // in order, instead of every process at once.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(137);  // the runner died before prctl
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
    std::string message = "cannot execute " + path + "\n";
    (void)!::write(2, message.data(), message.size());
    ::_exit(127);
  }
  process.pid = pid;
  return Status::Ok();
}

void LocalCluster::Reap(Process& process) {
  if (process.pid <= 0) return;
  int wstatus = 0;
  if (::waitpid(process.pid, &wstatus, WNOHANG) != process.pid) return;
  process.pid = -1;
  process.status.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  process.status.phase =
      process.status.exit_code == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed;
}

Status LocalCluster::Delete(const ReplicaName& name) {
  auto it = processes_.find(name);
  if (it == processes_.end()) return Status::Ok();
  Process& process = it->second;
  if (process.pid > 0) {
    ::kill(process.pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms_);
    while (process.pid > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      Reap(process);
    }
    if (process.pid > 0) {
      ::kill(process.pid, SIGKILL);
      ::waitpid(process.pid, nullptr, 0);
    }
  }
  processes_.erase(it);
  return Status::Ok();
}

std::vector<controller::ReplicaStatus> LocalCluster::List() {
  std::vector<controller::ReplicaStatus> all;
  for (auto& [name, process] : processes_) {
    Reap(process);
    all.push_back(process.status);
  }
  return all;
}

void LocalCluster::ReadPorts(const ReplicaName& name, Process& process) {
  if (process.grpc_port > 0 && process.metrics_port > 0) return;
  std::ifstream in(run_dir_ + "/" + name.ToString() + ".ports");
  std::string key;
  int value = 0;
  while (in >> key >> value) {
    if (key == "grpc") process.grpc_port = value;
    if (key == "metrics") process.metrics_port = value;
  }
}

int LocalCluster::GrpcPort(const ReplicaName& name) {
  auto it = processes_.find(name);
  if (it == processes_.end()) return 0;
  ReadPorts(name, it->second);
  return it->second.grpc_port;
}

int LocalCluster::MetricsPort(const ReplicaName& name) {
  auto it = processes_.find(name);
  if (it == processes_.end()) return 0;
  ReadPorts(name, it->second);
  return it->second.metrics_port;
}

pid_t LocalCluster::Pid(const ReplicaName& name) const {
  auto it = processes_.find(name);
  return it == processes_.end() ? -1 : it->second.pid;
}

std::string LocalCluster::SchedulerAddress() {
  int port = GrpcPort({controller::ReplicaRole::kScheduler, 0});
  return port > 0 ? "127.0.0.1:" + std::to_string(port) : "";
}

}  // namespace kubeps::local
