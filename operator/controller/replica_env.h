// The environment a replica starts with (DESIGN.md, "Configuration"): who
// it is, where its scheduler is, the job itself. The local runner and the
// Kubernetes operator both call this, so a node cannot tell them apart.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_
#define KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/training_job.h"
#include "operator/controller/cluster.h"

namespace kubeps::controller {

std::map<std::string, std::string> ReplicaEnv(const api::TrainingJob& job, const ReplicaName& name,
                                              const std::string& scheduler_address);

// "kubeps-server" for the scheduler and servers, "kubeps-agent" for workers.
std::string ReplicaBinary(const ReplicaName& name);

// The binary's arguments: "--serve" for the workers of a job that brings
// its own program (their agent serves it), none otherwise.
std::vector<std::string> ReplicaArgs(const api::TrainingJob& job, const ReplicaName& name);

// The training program a worker of `job` runs beside its agent, or nullopt
// (other roles, jobs of a built-in model). Its environment, in the order
// each layer overrides the one before: `defaults` (what the backend
// suggests, such as thread counts), the container's env, then `kubeps_env`
// (kubeps' own variables, which win as they do in the operator's pods).
std::optional<UserProcess> UserProcessOf(const api::TrainingJob& job, const ReplicaName& name,
                                         const std::map<std::string, std::string>& defaults,
                                         const std::map<std::string, std::string>& kubeps_env);

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_REPLICA_ENV_H_
