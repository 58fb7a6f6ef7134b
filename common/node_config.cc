#include "common/node_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>
#include <cstdio>
#include <unistd.h>

namespace kubeps {
namespace {

std::map<std::string, std::string> CollectSettings(int argc, char** argv) {
  std::map<std::string, std::string> settings;
  for (const char* name : {env::kRole, env::kJobName, env::kJob, env::kNodeId, env::kSchedulerAddr,
                           env::kPodIp, env::kPort, env::kMetricsPort, env::kNumServers,
                           env::kNumWorkers, env::kResendTimeoutMs, env::kMaxResends,
                           env::kTokenFile, env::kRunDir, env::kBlasThreads, env::kCheckpointDir}) {
    if (const char* value = std::getenv(name)) settings[name] = value;
  }
  // --scheduler_addr=x overrides KUBEPS_SCHEDULER_ADDR, and so on.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    size_t eq = arg.find('=');
    if (eq == std::string::npos) continue;
    std::string name = "KUBEPS_" + arg.substr(2, eq - 2);
    for (char& c : name) c = (c == '-') ? '_' : static_cast<char>(std::toupper(c));
    settings[name] = arg.substr(eq + 1);
  }
  return settings;
}

Status ReadInt(const std::map<std::string, std::string>& settings, const char* name, int min,
               int* out) {
  auto it = settings.find(name);
  if (it == settings.end()) return Status::Ok();
  char* end = nullptr;
  long value = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || value < min || value > 1 << 30) {
    return Status::Error(std::string(name) + ": want an integer >= " + std::to_string(min) +
                         ", got \"" + it->second + "\"");
  }
  *out = static_cast<int>(value);
  return Status::Ok();
}

std::string Get(const std::map<std::string, std::string>& settings, const char* name,
                const std::string& fallback = "") {
  auto it = settings.find(name);
  return it == settings.end() ? fallback : it->second;
}

}  // namespace

Status LoadNodeConfig(int argc, char** argv, NodeConfig* config) {
  auto settings = CollectSettings(argc, argv);
  config->role = Get(settings, env::kRole, config->role);
  config->job_name = Get(settings, env::kJobName, config->job_name);
  config->job_json = Get(settings, env::kJob, config->job_json);
  config->node_id = Get(settings, env::kNodeId, config->node_id);
  config->scheduler_address = Get(settings, env::kSchedulerAddr, config->scheduler_address);
  config->pod_ip = Get(settings, env::kPodIp, config->pod_ip);
  config->run_dir = Get(settings, env::kRunDir, config->run_dir);
  config->checkpoint_dir = Get(settings, env::kCheckpointDir, config->checkpoint_dir);
  for (auto [name, min, field] :
       {std::tuple{env::kPort, 0, &config->port}, {env::kMetricsPort, 0, &config->metrics_port},
        {env::kNumServers, 1, &config->num_servers}, {env::kNumWorkers, 1, &config->num_workers},
        {env::kResendTimeoutMs, 1, &config->resend_timeout_ms},
        {env::kMaxResends, 0, &config->max_resends}, {env::kBlasThreads, 1, &config->blas_threads}}) {
    Status s = ReadInt(settings, name, min, field);
    if (!s.ok()) return s;
  }
  std::string token_file = Get(settings, env::kTokenFile);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return Status::Error(std::string(env::kTokenFile) + ": cannot read " + token_file);
    std::getline(in, config->token);
  }
  if (config->node_id.empty()) {
    config->node_id = config->role + "-" + std::to_string(::getpid());
  }
  return Status::Ok();
}

void PublishPorts(const NodeConfig& config, int grpc_port, int metrics_port) {
  if (config.run_dir.empty()) return;
  // Written under a temporary name and renamed, so a reader never sees half.
  std::string path = config.run_dir + "/" + config.node_id + ".ports";
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "grpc " << grpc_port << "\nmetrics " << metrics_port << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace kubeps
