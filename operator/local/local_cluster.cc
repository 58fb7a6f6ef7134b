#include "operator/local/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>

#include "api/pod_env_codec.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/sidecar_folder.h"
#include "common/termination_message.h"
#include "operator/local/local_process.h"

namespace kubeps::local {

using controller::ReplicaName;
using controller::ReplicaPhase;

namespace {

// A dead agent is restarted at once, then after 0.5 s, 1 s, 2 s, ... up to
// this (Kubernetes' crash-loop back-off, shortened for one machine).
constexpr int64_t kAgentRestartDelayMaxMs = 10000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t AgentRestartDelayMs(int restarts_so_far) {
  if (restarts_so_far == 0) return 0;
  return std::min<int64_t>(kAgentRestartDelayMaxMs,
                           int64_t{500} << std::min(restarts_so_far - 1, 8));
}

// A new pod's shared folder starts empty, as an emptyDir does.
Status MakeEmptyFolder(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::Error("cannot create " + dir + ": " + error.message());
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::filesystem::remove_all(entry.path(), error);
  }
  ::chmod(dir.c_str(), 0700);
  return Status::Ok();
}

void KillAndReap(pid_t pid, bool whole_group) {
  ::kill(whole_group ? -pid : pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// The program's executable, checked before its pod starts: a command that
// cannot run fails the job at once, with the reason, instead of after
// every restart the run policy allows.
Status FindProgramOf(const controller::UserProcess& process, std::string* path) {
  const std::string what = "the command of container " + process.container;
  if (process.argv.empty()) return Status::Error(what + " is empty");
  std::error_code error;
  if (!process.working_dir.empty() && !std::filesystem::is_directory(process.working_dir, error)) {
    return Status::Error("the workingDir of container " + process.container + ", " +
                         process.working_dir +
                         ", is not a folder on this machine (kubeps run runs the command here, "
                         "without the container's image)");
  }
  auto own_path = process.env.find("PATH");
  const char* runner_path = std::getenv("PATH");
  const std::string search_path = own_path != process.env.end() ? own_path->second
                                  : runner_path                 ? runner_path
                                                                : "/usr/bin:/bin";
  std::string cwd = process.working_dir;
  if (cwd.empty()) cwd = std::filesystem::current_path(error).string();
  if (Status s = FindProgram(process.argv.front(), search_path, cwd, path); !s.ok()) {
    return Status::Error(what + " cannot run here: " + s.message());
  }
  return Status::Ok();
}

// The longest replica name with a shared folder ("worker-" and a rank).
constexpr std::size_t kLongestWorkerName = 16;

// `run_dir`, or where it is too deep for <run_dir>/worker-N/agent.sock to
// be bound (a Unix socket's path has at most 107 bytes), a new folder of
// /tmp of the runner's alone: a pod's emptyDir has a short path whatever
// the job is called. An agent that cannot bind fails; restarted, it fails
// again, without end.
std::string SocketRoot(const std::string& run_dir) {
  const std::size_t longest =
      run_dir.size() + 1 + kLongestWorkerName + 1 + std::strlen(kAgentSocketName);
  if (longest <= kMaxSocketPathBytes) return run_dir;
  std::string short_dir = "/tmp/kubeps-XXXXXX";
  if (::mkdtemp(short_dir.data()) == nullptr) {
    KLOG_ERROR << "cannot make a folder in /tmp for the agents' sockets (" << std::strerror(errno)
               << "); the agents try " << run_dir;
    return run_dir;
  }
  KLOG_INFO << "the run folder " << run_dir << " is too deep for a Unix socket's path; "
            << "the workers share their folders with their agents in " << short_dir;
  return short_dir;
}

}  // namespace

LocalCluster::LocalCluster(std::string bin_dir, std::string run_dir, int grace_ms, std::string host)
    : bin_dir_(std::move(bin_dir)),
      run_dir_(std::move(run_dir)),
      socket_root_(SocketRoot(run_dir_)),
      grace_ms_(grace_ms),
      host_(std::move(host)) {}

LocalCluster::~LocalCluster() {
  for (auto& [name, pod] : pods_) {
    if (pod.program_pid > 0) KillAndReap(pod.program_pid, /*whole_group=*/true);
    if (pod.pid > 0) KillAndReap(pod.pid, /*whole_group=*/false);
  }
  if (socket_root_ != run_dir_) {
    std::error_code ignored;
    std::filesystem::remove_all(socket_root_, ignored);
  }
}

std::string LocalCluster::SocketDir(const ReplicaName& name) const {
  return socket_root_ + "/" + name.ToString();
}

Status LocalCluster::Create(const controller::ReplicaLaunch& launch) {
  Pod& pod = pods_[launch.name];
  Reap(pod);
  if (pod.pid > 0 || pod.program_pid > 0) {
    return Status::Error(launch.name.ToString() + " is still running (pid " +
                         std::to_string(pod.program_pid > 0 ? pod.program_pid : pod.pid) + ")");
  }
  std::string program_path;
  if (launch.user_process) {
    if (Status s = FindProgramOf(*launch.user_process, &program_path); !s.ok()) return s;
  }
  // A worker scaled away and wanted again joins anew: not a restart.
  const bool rejoins =
      pod.status.phase == ReplicaPhase::kSucceeded && pod.status.reason == kReasonScaledAway;
  const bool restart = pod.status.phase != ReplicaPhase::kPending || pod.status.restarts > 0;
  if (restart && !rejoins) ++pod.status.restarts;
  pod.status.name = launch.name;
  pod.status.phase = ReplicaPhase::kRunning;
  pod.status.exit_code = 0;
  pod.launch = launch;
  pod.has_program = launch.user_process.has_value();
  pod.program_exit_code = -1;
  pod.agent_restarts = 0;
  pod.agent_start_at_ms = pod.agent_term_at_ms = pod.agent_kill_at_ms = -1;

  // Learn the old port before it is forgotten; at a first start, a ports
  // file there is an earlier run's in the same folder.
  if (restart || rejoins) ReadPorts(launch.name, pod);
  pod.metrics_port = 0;  // a new process picks a new one
  // A re-created replica binds the port its peers already know.
  if (pod.grpc_port > 0) pod.launch.env[api::env::kPort] = std::to_string(pod.grpc_port);
  ::unlink((run_dir_ + "/" + launch.name.ToString() + ".ports").c_str());
  // Where the replica says why it failed; the last life's words are gone.
  const std::string termination_log = run_dir_ + "/" + launch.name.ToString() + ".termination";
  ::unlink(termination_log.c_str());
  pod.status.reason.clear();
  pod.status.message.clear();
  pod.termination_read = false;
  pod.launch.env[api::env::kTerminationLog] = termination_log;
  if (pod.launch.user_process)
    pod.launch.user_process->env[api::env::kTerminationLog] = termination_log;

  if (pod.has_program) {
    const std::string socket_dir = SocketDir(launch.name);
    if (Status s = MakeEmptyFolder(socket_dir); !s.ok()) return s;
    pod.launch.env[api::env::kSocketDir] = socket_dir;
    pod.launch.user_process->env[api::env::kSocketDir] = socket_dir;
  }
  // The agent first: it registers while the program starts (a client waits
  // for the agent's agent.json).
  if (Status s = StartAgent(pod); !s.ok()) {
    pod.status.phase = ReplicaPhase::kFailed;
    return s;
  }
  if (!pod.has_program) return Status::Ok();
  const controller::UserProcess& program = *pod.launch.user_process;
  ChildSpec spec{program_path, program.argv, program.env, program.working_dir,
                 launch.name.ToString() + "/" + program.container};
  if (Status s = StartChild(spec, &pod.program_pid); !s.ok()) {
    StopPods({&pod}, grace_ms_);
    pod.status.phase = ReplicaPhase::kFailed;
    return s;
  }
  return Status::Ok();
}

Status LocalCluster::StartAgent(Pod& pod) {
  const std::string path = bin_dir_ + "/" + pod.launch.binary;
  std::vector<std::string> argv{path};
  argv.insert(argv.end(), pod.launch.args.begin(), pod.launch.args.end());
  return StartChild(ChildSpec{path, argv, pod.launch.env, "", ""}, &pod.pid);
}

void LocalCluster::Reap(Pod& pod) {
  if (pod.has_program) {
    ReapSidecarPod(pod);
    return;
  }
  if (pod.pid <= 0) return;
  const int code = ReapIfEnded(pod.pid);
  if (code < 0) return;
  pod.pid = -1;
  pod.status.exit_code = code;
  pod.status.phase = code == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed;
}

void LocalCluster::ReapSidecarPod(Pod& pod) {
  const std::string name = pod.status.name.ToString();
  const int64_t now = NowMs();
  if (pod.program_pid > 0) {
    const int code = ReapIfEnded(pod.program_pid);
    if (code >= 0) {
      pod.program_pid = -1;
      pod.program_exit_code = code;
      if (code != 0) {
        KLOG_INFO << name << "'s program (container " << pod.launch.user_process->container
                  << ") exited with code " << code;
      }
      pod.agent_start_at_ms = -1;  // a dead agent stays dead now
      // As the kubelet ends a native sidecar once the main containers ended.
      pod.agent_term_at_ms = now;
    }
  }
  const bool program_runs = pod.program_pid > 0;
  if (pod.pid > 0) {
    const int code = ReapIfEnded(pod.pid);
    if (code >= 0) {
      pod.pid = -1;
      // Exit 0 is the agent's end after its program said finish (the
      // program may still evaluate or shut down): the worker is done, and
      // a new agent would register it again.
      if (program_runs && code != 0) {
        KLOG_INFO << name << "'s agent exited with code " << code << "; restarting it";
        pod.agent_start_at_ms = now + AgentRestartDelayMs(pod.agent_restarts);
      }
    }
  }
  if (program_runs && pod.pid < 0 && pod.agent_start_at_ms >= 0 && now >= pod.agent_start_at_ms) {
    ++pod.agent_restarts;
    pod.agent_start_at_ms = -1;
    ::unlink((run_dir_ + "/" + name + ".ports").c_str());
    pod.metrics_port = 0;
    if (Status s = StartAgent(pod); !s.ok()) {
      KLOG_ERROR << "restarting " << name << "'s agent: " << s.message();
      pod.agent_start_at_ms = now + AgentRestartDelayMs(pod.agent_restarts);
    }
  }
  if (program_runs) return;
  // The program has ended: the agent goes too, then the pod is over.
  if (pod.pid > 0 && pod.agent_kill_at_ms >= 0 && now >= pod.agent_kill_at_ms) {
    KLOG_INFO << name << "'s agent ignored SIGTERM for " << grace_ms_ << " ms; killing it";
    KillAndReap(pod.pid, /*whole_group=*/false);
    pod.pid = -1;
  } else if (pod.pid > 0 && pod.agent_kill_at_ms < 0 && now >= pod.agent_term_at_ms) {
    KLOG_INFO << "stopping " << name << "'s agent: its program exited with code "
              << pod.program_exit_code;
    ::kill(pod.pid, SIGTERM);
    pod.agent_kill_at_ms = now + grace_ms_;
  }
  if (pod.pid > 0) return;
  pod.status.exit_code = pod.program_exit_code;
  pod.status.phase = pod.program_exit_code == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed;
}

// As Kubernetes ends pods deleted together: each pod's program (or its one
// process) is asked first, every pod at once; an agent is asked once its
// program has ended; at the one deadline whatever is left is killed.
void LocalCluster::StopPods(std::vector<Pod*> pods, int grace_ms) {
  // Not NowMs(): whole milliseconds would cut the grace up to 1 ms short.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (Pod* pod : pods) {
    if (pod->program_pid > 0) {
      ::kill(-pod->program_pid, SIGTERM);  // its whole group: data loader processes too
    } else if (pod->pid > 0) {
      ::kill(pod->pid, SIGTERM);
    }
  }
  for (;;) {
    bool running = false;
    for (Pod* pod : pods) {
      if (pod->program_pid > 0 && ReapIfEnded(pod->program_pid) >= 0) {
        pod->program_pid = -1;
        if (pod->pid > 0) ::kill(pod->pid, SIGTERM);  // the sidecar goes after its program
      }
      if (pod->pid > 0 && ReapIfEnded(pod->pid) >= 0) pod->pid = -1;
      running = running || pod->program_pid > 0 || pod->pid > 0;
    }
    if (!running || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (Pod* pod : pods) {
    if (pod->program_pid > 0) KillAndReap(pod->program_pid, /*whole_group=*/true);
    if (pod->pid > 0) KillAndReap(pod->pid, /*whole_group=*/false);
    pod->program_pid = pod->pid = -1;
  }
}

Status LocalCluster::DeleteAll(const std::vector<ReplicaName>& names, int grace_ms) {
  std::vector<Pod*> stopping;
  for (const ReplicaName& name : names) {
    auto it = pods_.find(name);
    if (it != pods_.end()) stopping.push_back(&it->second);
  }
  StopPods(stopping, grace_ms == kBackendGrace ? grace_ms_ : grace_ms);
  for (const ReplicaName& name : names) pods_.erase(name);
  return Status::Ok();
}

std::vector<controller::ReplicaStatus> LocalCluster::List() {
  std::vector<controller::ReplicaStatus> all;
  for (auto& [name, pod] : pods_) {
    Reap(pod);
    const bool ended =
        pod.status.phase == ReplicaPhase::kSucceeded || pod.status.phase == ReplicaPhase::kFailed;
    if (ended && !pod.termination_read) {
      // Read once per life: a server's exit 0 means "done" only with the
      // reason JobOver, a failure's reason may make it permanent.
      pod.termination_read = true;
      std::ifstream in(run_dir_ + "/" + name.ToString() + ".termination");
      std::string text;
      if (in && std::getline(in, text)) {
        controller::ParseTerminationMessage(text, &pod.status.reason, &pod.status.message);
      }
    }
    all.push_back(pod.status);
  }
  return all;
}

void LocalCluster::ReadPorts(const ReplicaName& name, Pod& pod) {
  if (pod.grpc_port > 0 && pod.metrics_port > 0) return;
  std::ifstream in(run_dir_ + "/" + name.ToString() + ".ports");
  std::string key;
  int value = 0;
  while (in >> key >> value) {
    if (key == "grpc") pod.grpc_port = value;
    if (key == "metrics") pod.metrics_port = value;
  }
}

int LocalCluster::GrpcPort(const ReplicaName& name) {
  auto it = pods_.find(name);
  if (it == pods_.end()) return 0;
  ReadPorts(name, it->second);
  return it->second.grpc_port;
}

int LocalCluster::MetricsPort(const ReplicaName& name) {
  auto it = pods_.find(name);
  if (it == pods_.end()) return 0;
  ReadPorts(name, it->second);
  return it->second.metrics_port;
}

pid_t LocalCluster::Pid(const ReplicaName& name) const {
  auto it = pods_.find(name);
  if (it == pods_.end()) return -1;
  return it->second.has_program ? it->second.program_pid : it->second.pid;
}

pid_t LocalCluster::AgentPid(const ReplicaName& name) const {
  auto it = pods_.find(name);
  return it == pods_.end() || !it->second.has_program ? -1 : it->second.pid;
}

int LocalCluster::AgentRestarts(const ReplicaName& name) const {
  auto it = pods_.find(name);
  return it == pods_.end() ? 0 : it->second.agent_restarts;
}

std::string LocalCluster::SchedulerAddress() {
  int port = GrpcPort({controller::ReplicaRole::kScheduler, 0});
  return port > 0 ? JoinHostPort(host_, port) : "";
}

}  // namespace kubeps::local
