// TrainingJob: the one manifest a user writes. These types are the API of
// kubeps (group kubeps.io, version v1alpha1); `kubeps run`, the operator and
// every pod read the same structure, parsed and validated by one function.
// The member initializers below are the defaults; which member each manifest
// field fills, with its checks, is the field table in training_job_schema.cc.
//
// Plain values and pure functions: safe from any thread.
#ifndef KUBEPS_API_TRAINING_JOB_H_
#define KUBEPS_API_TRAINING_JOB_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubeps::api {

inline constexpr const char* kApiVersion = "kubeps.io/v1alpha1";
inline constexpr const char* kKind = "TrainingJob";

enum class SyncMode { kSync, kAsync };
enum class RestartPolicy { kOnFailure, kNever, kExitCode };

// The learning rate over the updates (common/optimizer.h,
// LearningRateSchedule): a warmup, then a decay to a floor.
struct LearningRateScheduleSpec {
  int64_t warmup_steps = 0;
  std::string decay = "none";  // none | cosine | linear
  int64_t decay_steps = 0;
  double min_learning_rate = 0.0;
  bool enabled() const { return warmup_steps > 0 || decay != "none"; }
};

struct OptimizerSpec {
  std::string name = "sgd";  // sgd | momentum | adam | none (servers only average)
  double learning_rate = 0.1;
  double momentum = 0.9;  // momentum only
  double beta1 = 0.9;     // adam only
  double beta2 = 0.999;   // adam only
  double epsilon = 1e-8;  // adam only
  double weight_decay = 0.0;
  LearningRateScheduleSpec schedule;
};

// One environment variable of a container, as Kubernetes spells it.
struct EnvVar {
  std::string name;
  std::string value;
  // A `valueFrom` source (secretKeyRef, fieldRef, ...), verbatim; null when
  // `value` is given. Only Kubernetes can resolve it: `kubeps run` does not
  // set such a variable, and says so.
  nlohmann::json value_from;
};

// The training program a job brings instead of a built-in model: the main
// container of the worker's pod template (see MainContainerIndex in
// api/user_container.h), typed for `kubeps run`, which runs its command
// beside the worker's kubeps-agent. The operator uses the template's JSON,
// which keeps every field (resources, volumeMounts, ...).
struct UserContainer {
  int index = 0;  // its position in template.spec.containers
  std::string name;
  std::string image;  // not used by `kubeps run`
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::vector<EnvVar> env;  // in the manifest's order
  std::string working_dir;  // "" = the image's (locally: the manifest's folder)
};

// Per-role pod template overrides, kept verbatim (as JSON) so the operator
// can merge them into the pods it creates. A worker template's main
// container is also the user's training program when the job names no
// built-in model (TrainingJobSpec::user_container).
struct ReplicaSpec {
  int replicas = 0;
  nlohmann::json template_override;  // null when absent
};

enum class CleanPodPolicy { kAll, kRunning, kNone };

// spec.replicaSpecs.worker.elasticPolicy: the workers of a running job may
// be scaled between min_replicas and max_replicas (kubectl scale, kubeps
// scale), and a worker that cannot come back is dropped. Absent (both 0):
// the workers are fixed.
struct ElasticPolicy {
  int min_replicas = 0;
  int max_replicas = 0;
  // A worker silent this long (its pod gone, not replaced) is dropped, while
  // at least min_replicas remain; at min_replicas the job fails instead.
  int64_t replace_timeout_seconds = 60;
  // global: the global batch (batchSize x replicas at the start) stays and is
  // cut over the workers of each step, so the trajectory does not depend on
  // how many computed it. perWorker is refused: not supported yet.
  std::string batch = "global";
  bool enabled() const { return max_replicas > 0 || min_replicas > 0; }
};

struct RunPolicy {
  RestartPolicy restart_policy = RestartPolicy::kOnFailure;
  int backoff_limit = 3;
  int64_t active_deadline_seconds = 0;      // 0 = no deadline
  int64_t ttl_seconds_after_finished = -1;  // -1 = keep the finished job
  // A pod that still cannot start this long after it was created (its image
  // cannot be pulled, no node can take it, its configuration is refused)
  // fails the job; 0 = wait for it forever, with a condition saying why.
  int64_t pod_start_timeout_seconds = 0;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;  // pods deleted when the job ends
  bool suspend = false;                                        // no pods while true
};

// Gang scheduling (Volcano or scheduler-plugins): when scheduler_name is
// set, the operator creates a PodGroup and sets the pods' schedulerName.
struct SchedulingPolicy {
  std::string scheduler_name;  // "" = the default scheduler, no PodGroup
  // Which PodGroup API that scheduler reads: "Volcano", "SchedulerPlugins"
  // or "None"; "" = known from the scheduler's name (PodGroupApi below).
  std::string pod_group;
  int min_available = 0;  // 0 = every replica
  std::string queue;
  std::string priority_class;
};

// The PodGroup API a job's scheduler reads: `pod_group` when set, else
// Volcano's for "volcano" and scheduler-plugins' for its default name
// "scheduler-plugins-scheduler"; "" when neither says (the manifest is then
// refused: a guess would create an object the scheduler never reads, or one
// of a kind the cluster does not have).
std::string PodGroupApi(const SchedulingPolicy& policy);

struct TrainingJobSpec {
  SyncMode mode = SyncMode::kSync;
  // A job either trains a built-in model on Fashion-MNIST (model and
  // dataset_path set; a manifest with a data set and no model gets "mlp") or
  // brings its own training program (user_container set, model and
  // dataset_path empty). The parser enforces exactly one.
  std::string model;         // a name of api/models.h, or "" for a job's own program
  std::string dataset_path;  // folder holding the four Fashion-MNIST IDX .gz files
  OptimizerSpec optimizer;
  int batch_size = 64;  // per worker
  int epochs = 1;
  uint64_t seed = 1;                  // parameter initialisation and data order
  int64_t big_array_bound = 1000000;  // elements; larger tensors are sliced over all servers
  int resend_timeout_ms = 1000;
  int max_resends = 10;
  int progress_interval_ms = 2000;  // how often workers print a progress line
  int gpus_per_worker = 0;
  std::string backend = "cpu";  // cpu | cuda | auto (cuda when the worker sees a GPU)
  // What a shard does with a NaN or Inf gradient: Fail (refuse it; the
  // worker, and with it the job, fails) | SkipStep (skip that update, count it).
  std::string non_finite = "Fail";
  // How gradients travel to the servers (common/gradient_codec.h): none
  // (float32) | fp16 | bf16 | 2bit; 2bit sends +threshold, -threshold or 0
  // per value and keeps the rest on the worker for later steps.
  std::string compression = "none";
  double compression_threshold = 0.5;
  // Shards write their parameters and optimizer state every
  // checkpoint_interval_steps steps into checkpoint_path (the local runner
  // uses its run folder when empty); a restarted shard reloads them.
  std::string checkpoint_path;
  int checkpoint_interval_steps = 100;
  // A job started over checkpoints of an earlier run (the same path):
  // true resumes from the newest step every shard holds; false deletes them
  // and trains from the start.
  bool checkpoint_resume = true;
  // Mutual TLS between the job's pods (spec.security.tls): "Enabled",
  // "Disabled", or "" for the operator's default (TlsEnabled).
  std::string tls;
  ReplicaSpec ps{2, nullptr};
  ReplicaSpec worker{2, nullptr};
  ElasticPolicy elastic;              // the workers'; see ElasticPolicy
  ReplicaSpec scheduler{1, nullptr};  // always exactly one; only its template may be given
  RunPolicy run_policy;
  SchedulingPolicy scheduling_policy;
  // Derived from worker.template_override by the parser (not a field of its
  // own: ToJson writes the template, which holds it).
  std::optional<UserContainer> user_container;

  bool brings_own_program() const { return user_container.has_value(); }
  // Whether the job runs with mutual TLS, given the default for jobs that
  // do not say.
  bool TlsEnabled(bool by_default) const { return tls.empty() ? by_default : tls == "Enabled"; }
};

struct TrainingJob {
  std::string name;  // metadata.name
  std::string namespace_ = "default";
  // This run's identity: metadata.uid on Kubernetes (set by the operator), a
  // new one for every `kubeps run`. Not part of the manifest's JSON.
  std::string uid;
  TrainingJobSpec spec;
};

// One problem found in a manifest: `field` is a path such as
// "spec.replicaSpecs.worker.replicas"; `message` says what is wrong.
struct FieldError {
  std::string field;
  std::string message;
  std::string ToString() const { return field + ": " + message; }
};

struct ParseResult {
  std::optional<TrainingJob> job;  // set only when errors is empty
  std::vector<FieldError> errors;
  bool ok() const { return errors.empty(); }
  // All errors, one per line, prefixed with `source` (a file name).
  std::string ErrorReport(const std::string& source) const;
};

// Parses and validates a TrainingJob manifest given as YAML (or JSON) text.
// Every problem is reported, not only the first; unknown fields are errors.
ParseResult ParseTrainingJob(const std::string& yaml_text);
ParseResult ParseTrainingJobFile(const std::string& path);

// The canonical manifest of `job` as JSON (apiVersion, kind, metadata, spec),
// which ParseTrainingJob accepts again unchanged. Used to hand the job to
// every process (KUBEPS_JOB) and to the Kubernetes API.
nlohmann::json ToJson(const TrainingJob& job);

const char* ToString(SyncMode mode);
const char* ToString(RestartPolicy policy);
const char* ToString(CleanPodPolicy policy);

}  // namespace kubeps::api

#endif  // KUBEPS_API_TRAINING_JOB_H_
