#include "api/pod_env_codec.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>

namespace kubeps::api {
namespace {

// "--scheduler-addr" for KUBEPS_SCHEDULER_ADDR.
std::string FlagName(const char* variable) {
  std::string name = std::string(variable).substr(sizeof("KUBEPS_") - 1);
  for (char& c : name)
    c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "--" + name;
}

}  // namespace

std::map<std::string, std::string> EncodePodEnv(const TrainingJob& job, const std::string& role,
                                                const std::string& node_id,
                                                const std::string& scheduler_address) {
  std::map<std::string, std::string> env = {
      {env::kRole, role},
      {env::kJobName, job.name},
      {env::kJob, ToJson(job).dump()},
      {env::kNodeId, node_id},
      {env::kSchedulerAddr, scheduler_address},
      {env::kNumServers, std::to_string(job.spec.ps.replicas)},
      {env::kNumWorkers, std::to_string(job.spec.worker.replicas)},
      {env::kResendTimeoutMs, std::to_string(job.spec.resend_timeout_ms)},
      {env::kMaxResends, std::to_string(job.spec.max_resends)},
      {env::kCheckpointDir, job.spec.checkpoint_path},
      {env::kRunId, job.uid},
  };
  if (role == "server") {
    // A deleted job's server pod stops within its grace period (Kubernetes'
    // default 30 s, or what the ps template sets), then lets go of its
    // folder.
    const nlohmann::json& tmpl = job.spec.ps.template_override;
    long grace = 30;
    if (tmpl.is_object() && tmpl.contains("spec") && tmpl["spec"].is_object() &&
        tmpl["spec"].contains("terminationGracePeriodSeconds") &&
        tmpl["spec"]["terminationGracePeriodSeconds"].is_number_integer()) {
      grace = tmpl["spec"]["terminationGracePeriodSeconds"].get<long>();
    }
    env[env::kHolderGraceSeconds] = std::to_string(std::clamp(grace, 0L, 86400L) + 10);
  }
  return env;
}

void AddNodeFlags(CLI::App* app, NodeConfig* c) {
  const auto text = [&](const char* variable, std::string* field, const char* help) {
    app->add_option(FlagName(variable), *field, help)->envname(variable)->capture_default_str();
  };
  // A pod is configured through its variables, so a bad value names the
  // variable as well as the flag (CLI11's own range checks name the flag only).
  const auto number = [&](const char* variable, int* field, int min, const char* help) {
    const std::string flag = FlagName(variable);
    auto in_range = [variable, flag, min](std::string& value) -> std::string {
      int parsed = 0;
      const char* end = value.data() + value.size();
      auto [rest, error] = std::from_chars(value.data(), end, parsed);
      if (error == std::errc() && rest == end && parsed >= min) return "";
      return std::string(variable) + " (or " + flag +
             ") must be an integer >= " + std::to_string(min) + ", got \"" + value + "\"";
    };
    app->add_option(flag, *field, help)
        ->envname(variable)
        ->check(CLI::Validator(in_range, min == 0 ? "NONNEGATIVE" : "POSITIVE"))
        ->capture_default_str();
  };
  text(env::kRole, &c->role, "scheduler | server | worker | local");
  text(env::kJobName, &c->job_name, "the TrainingJob's name");
  text(env::kJob, &c->job_json, "the canonical TrainingJob manifest, as JSON");
  text(env::kNodeId, &c->node_id, "stable identity (the pod's name); a restart keeps the rank");
  text(env::kSchedulerAddr, &c->scheduler_address, "host:port of the job's scheduler");
  text(env::kPodIp, &c->pod_ip, "address to listen on and to report to the scheduler");
  number(env::kPort, &c->port, 0, "gRPC port (0: any free port)");
  number(env::kMetricsPort, &c->metrics_port, 0, "Prometheus metrics port (0: any free port)");
  number(env::kNumServers, &c->num_servers, 1, "parameter servers in the job");
  number(env::kNumWorkers, &c->num_workers, 1, "workers in the job");
  number(env::kResendTimeoutMs, &c->resend_timeout_ms, 1,
         "deadline of one RPC before it is resent");
  number(env::kMaxResends, &c->max_resends, 0, "resends of one RPC before it fails");
  text(env::kTokenFile, &c->token_file, "file holding the job's token (empty: no token)");
  text(env::kTlsDir, &c->tls_dir,
       "mutual TLS: the directory of the job's ca.crt and this replica's tls.crt and tls.key "
       "(empty: plain TCP)");
  text(env::kRunDir, &c->run_dir, "local runs: where the ports are published");
  number(env::kBlasThreads, &c->blas_threads, 0,
         "OpenBLAS and OpenMP threads, and a server's threads for a big part's update (0: as "
         "many as the cores this process may use: its CPU affinity and its cgroup's CPU limit, a "
         "container's resources.limits.cpu)");
  number(env::kCpuRequest, &c->cpu_request, 0,
         "workers and servers on Kubernetes: the cores their container requested, rounded up "
         "(0: none), which a built-in model computes on and a server splits a big part's "
         "update over, or one thread where it is 0");
  text(env::kCheckpointDir, &c->checkpoint_dir, "servers: checkpoints go to <dir>/<node id>/");
  number(env::kHolderGraceSeconds, &c->holder_grace_seconds, 0,
         "servers: how long another job's process may hold this server's checkpoint folder "
         "before the server fails (it may be a deleted job's pod, stopping)");
  text(env::kNodeName, &c->node_name,
       "the Kubernetes node this pod runs on (spec.nodeName), which a server's checkpoint "
       "folder record names");
  text(env::kRunId, &c->run_id,
       "this run of the job (the TrainingJob's UID): with spec.checkpoint.resume false, servers "
       "delete checkpoints another run left (empty: they keep every checkpoint)");
  text(env::kSocketDir, &c->socket_dir,
       "workers with --serve: the directory shared with the training process (agent.sock, "
       "agent.json, the tensors' shared memory)");
  text(env::kDesiredWorkersFile, &c->desired_workers_file,
       "elastic jobs' scheduler: the file holding how many workers the job should have");
}

Status FinishNodeConfig(NodeConfig* config) {
  config->token = JobToken::None();
  if (!config->token_file.empty()) {
    if (Status s = JobToken::FromFile(config->token_file, &config->token); !s.ok()) {
      return Status::InvalidArgument(std::string(env::kTokenFile) + ": " + s.message());
    }
  }
  config->security = TransportSecurity::Insecure();
  if (!config->tls_dir.empty()) {
    if (Status s = TransportSecurity::FromDirectory(config->tls_dir, &config->security); !s.ok())
      return Status::InvalidArgument(std::string(env::kTlsDir) + ": " + s.message());
  }
  if (config->node_id.empty()) config->node_id = config->role + "-" + std::to_string(::getpid());
  return Status::Ok();
}

Status DecodeJob(const std::string& job_json, TrainingJob* job) {
  ParseResult parsed = ParseTrainingJob(job_json);
  if (!parsed.ok()) return Status::InvalidArgument(parsed.ErrorReport(env::kJob));
  *job = *parsed.job;
  return Status::Ok();
}

OptimizerConfig ToOptimizerConfig(const OptimizerSpec& o) {
  const LearningRateScheduleSpec& s = o.schedule;
  return OptimizerConfig{
      o.name,
      static_cast<float>(o.learning_rate),
      static_cast<float>(o.momentum),
      static_cast<float>(o.beta1),
      static_cast<float>(o.beta2),
      static_cast<float>(o.epsilon),
      static_cast<float>(o.weight_decay),
      {static_cast<uint64_t>(s.warmup_steps), s.decay, static_cast<uint64_t>(s.decay_steps),
       static_cast<float>(s.min_learning_rate)}};
}

namespace {

// Written under a temporary name and renamed, so a reader never sees half.
void WriteRunFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

void PublishPorts(const NodeConfig& config, int grpc_port, int metrics_port) {
  if (config.run_dir.empty()) return;
  WriteRunFile(
      config.run_dir + "/" + config.node_id + ".ports",
      "grpc " + std::to_string(grpc_port) + "\nmetrics " + std::to_string(metrics_port) + "\n");
}

void PublishComputingWorkers(const std::string& run_dir, const std::vector<int>& ranks) {
  if (run_dir.empty()) return;
  std::string text;
  for (int rank : ranks) text += std::to_string(rank) + " ";
  WriteRunFile(run_dir + "/" + kComputingWorkersName, text + "\n");
}

std::optional<std::vector<int>> ReadComputingWorkers(const std::string& run_dir) {
  std::ifstream in(run_dir + "/" + kComputingWorkersName);
  if (!in) return std::nullopt;
  std::vector<int> ranks;
  for (int rank; in >> rank;) ranks.push_back(rank);
  if (!in.eof()) return std::nullopt;  // not a list of ranks: not the scheduler's
  return ranks;
}

}  // namespace kubeps::api
