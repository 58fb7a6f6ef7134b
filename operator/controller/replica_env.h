// The environment a replica starts with (DESIGN.md, "Configuration"): who
// it is, where its scheduler is, the job itself. The local runner and the
// Kubernetes operator both call this, so a node cannot tell them apart.
#ifndef KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_
#define KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_

#include <map>
#include <string>

#include "api/training_job.h"
#include "operator/controller/cluster.h"

namespace kubeps::controller {

std::map<std::string, std::string> ReplicaEnv(const api::TrainingJob& job, const ReplicaName& name,
                                              const std::string& scheduler_address);

// "kubeps-server" for the scheduler and servers, "kubeps-agent" for workers.
std::string ReplicaBinary(const ReplicaName& name);

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_
