// The choice every TrainingJob makes: train one of kubeps' built-in models,
// or bring its own training program in the worker's pod template. Both
// live in the worker's main container:
//
//   * the main container of a worker pod template is the container named
//     "worker", or the only container when there is one;
//   * with spec.model (or spec.dataset, which implies the mlp model) it is
//     kubeps' own container: it runs kubeps-agent's built-in trainer, and
//     the template may set its image, resources and env, not its command;
//   * without them it is the user's container: its command (with args, env
//     and workingDir) is the training program, and kubeps adds its agent
//     beside it as a sidecar named "kubeps-agent" (a native sidecar on
//     Kubernetes, a second process under `kubeps run`).
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_API_USER_CONTAINER_H_
#define KUBEPS_API_USER_CONTAINER_H_

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "api/training_job.h"

namespace kubeps::api {

// The name that makes a container of a worker template its main one.
inline constexpr const char* kWorkerContainerName = "worker";
// kubeps' sidecar in the pods of a job that brings its own program; no
// container of the worker template may take this name.
inline constexpr const char* kAgentContainerName = "kubeps-agent";
// Where template.spec.containers is, for messages.
inline constexpr const char* kWorkerContainersPath =
    "spec.replicaSpecs.worker.template.spec.containers";
// Said of a main container of the worker template named kAgentContainerName.
inline constexpr const char* kAgentNameTaken =
    "\"kubeps-agent\" is the name of the kubeps agent that runs beside your program; name this "
    "container otherwise";
// Said of several containers none of which is named kWorkerContainerName,
// after their count.
inline constexpr const char* kNoneNamedWorker =
    " containers and none is named \"worker\": name the container that runs your training "
    "program \"worker\"";

// Said at spec.model of a job with neither a built-in model nor a program.
std::string NoProgramMessage();

// The index in `pod_template`'s spec.containers of the container named
// `name`, else of the only container; -1 when there is neither (no
// template, no containers, or several without that name).
int MainContainerIndex(const nlohmann::json& pod_template, const std::string& name);

// Kubernetes' variable references in a container's command, args and env
// values: $(NAME) becomes the value of NAME when `variables` holds it and
// stays as written otherwise; $$ is a literal $ (so $$(NAME) is "$(NAME)").
std::string ExpandVariableReferences(const std::string& text,
                                     const std::map<std::string, std::string>& variables);

namespace internal {

// Runs after the spec's fields were read into `spec` (`spec_node` is the
// manifest's spec): decides between a built-in model and the job's own
// program, fills spec->model ("mlp" for a data set without a model) or
// spec->user_container, and reports a job with neither or both, and every
// problem of the user's container, by field path.
void ReadTrainingProgram(const YAML::Node& spec_node, TrainingJobSpec* spec,
                         std::vector<FieldError>* errors);

}  // namespace internal
}  // namespace kubeps::api

#endif  // KUBEPS_API_USER_CONTAINER_H_
