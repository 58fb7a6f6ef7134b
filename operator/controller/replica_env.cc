#include "operator/controller/replica_env.h"

#include "api/pod_env_codec.h"

namespace kubeps::controller {

std::map<std::string, std::string> ReplicaEnv(const api::TrainingJob& job, const ReplicaName& name,
                                              const std::string& scheduler_address) {
  return api::EncodePodEnv(job, ToString(name.role), name.ToString(), scheduler_address);
}

std::string ReplicaBinary(const ReplicaName& name) {
  return name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
}

}  // namespace kubeps::controller
