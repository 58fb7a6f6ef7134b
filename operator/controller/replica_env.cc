#include "operator/controller/replica_env.h"

#include "api/pod_env_codec.h"
#include "api/user_container.h"

namespace kubeps::controller {

std::map<std::string, std::string> ReplicaEnv(const api::TrainingJob& job, const ReplicaName& name,
                                              const std::string& scheduler_address) {
  return api::EncodePodEnv(job, ToString(name.role), name.ToString(), scheduler_address);
}

std::string ReplicaBinary(const ReplicaName& name) {
  return name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
}

std::vector<std::string> ReplicaArgs(const api::TrainingJob& job, const ReplicaName& name) {
  if (name.role == ReplicaRole::kWorker && job.spec.brings_own_program()) return {"--serve"};
  return {};
}

std::optional<UserProcess> UserProcessOf(const api::TrainingJob& job, const ReplicaName& name,
                                         const std::map<std::string, std::string>& defaults,
                                         const std::map<std::string, std::string>& kubeps_env) {
  if (name.role != ReplicaRole::kWorker || !job.spec.brings_own_program()) return std::nullopt;
  const api::UserContainer& container = *job.spec.user_container;
  UserProcess process;
  process.container = container.name;
  process.working_dir = container.working_dir;
  // As on Kubernetes: an env value may refer to the variables listed before
  // it, the command and args to every variable of the container.
  std::map<std::string, std::string> listed;
  for (const api::EnvVar& var : container.env) {
    if (!var.value_from.is_null()) {
      process.cluster_only_env.push_back(var.name);
      listed.erase(var.name);
      continue;
    }
    // A later entry of the same name wins, as on Kubernetes.
    listed[var.name] = api::ExpandVariableReferences(var.value, listed);
  }
  process.env = defaults;
  for (const auto& [key, value] : listed) process.env[key] = value;
  for (const std::string& name : process.cluster_only_env) process.env.erase(name);
  for (const auto& [key, value] : kubeps_env) process.env[key] = value;
  for (const auto* part : {&container.command, &container.args}) {
    for (const std::string& word : *part) {
      process.argv.push_back(api::ExpandVariableReferences(word, process.env));
    }
  }
  return process;
}

}  // namespace kubeps::controller
