#include "operator/controller/replica_env.h"

#include "common/node_config.h"

namespace kubeps::controller {

std::map<std::string, std::string> ReplicaEnv(const api::TrainingJob& job, const ReplicaName& name,
                                              const std::string& scheduler_address) {
  return {
      {env::kRole, ToString(name.role)},
      {env::kJobName, job.name},
      {env::kJob, api::ToJson(job).dump()},
      {env::kNodeId, name.ToString()},
      {env::kSchedulerAddr, scheduler_address},
      {env::kNumServers, std::to_string(job.spec.ps.replicas)},
      {env::kNumWorkers, std::to_string(job.spec.worker.replicas)},
      {env::kResendTimeoutMs, std::to_string(job.spec.resend_timeout_ms)},
      {env::kMaxResends, std::to_string(job.spec.max_resends)},
      {env::kCheckpointDir, job.spec.checkpoint_path},
  };
}

std::string ReplicaBinary(const ReplicaName& name) {
  return name.role == ReplicaRole::kWorker ? "kubeps-agent" : "kubeps-server";
}

}  // namespace kubeps::controller
