// The TrainingJob's spec, field by field. This table is the schema: edit it
// (and the struct in training_job.h, whose member initializers are the
// defaults), then run scripts/generate-crd.sh to regenerate the CRD, the
// plain manifests in deploy/ and the README's field table.
#include "api/training_job_schema.h"

#include <string>

#include "api/models.h"

namespace kubeps::api {
namespace {

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelInfo& model : kModels) names.push_back(model.name);
  return names;
}

std::string ModelDescriptions() {
  std::string text;
  for (const ModelInfo& model : kModels) {
    if (!text.empty()) text += "; ";
    text += std::string(model.name) + ": " + model.summary;
  }
  return text;
}

FieldSpec Replica(const std::string& role, ReplicaSpec TrainingJobSpec::*member,
                  const std::string& template_doc, std::vector<FieldSpec> more = {}) {
  std::vector<FieldSpec> fields{
      Integer("replicas", At(member, &ReplicaSpec::replicas)).AtLeast(1).Doc("pods of this role"),
      PodTemplate("template", At(member, &ReplicaSpec::template_override)).Doc(template_doc),
  };
  for (FieldSpec& field : more) fields.push_back(std::move(field));
  return Object(role, std::move(fields));
}

// No defaults in the CRD: a job without the policy must not gain one.
FieldSpec ElasticPolicyField() {
  using E = ElasticPolicy;
  auto at = [](auto E::*member) { return At(&TrainingJobSpec::elastic, member); };
  return Object("elasticPolicy",
                {
                    Integer("minReplicas", at(&E::min_replicas))
                        .AtLeast(1)
                        .UnsetByDefault()
                        .Doc("the fewest workers the job trains with"),
                    Integer("maxReplicas", at(&E::max_replicas))
                        .AtLeast(1)
                        .UnsetByDefault()
                        .Doc("the most workers it may be scaled to"),
                    Integer("replaceTimeoutSeconds", at(&E::replace_timeout_seconds))
                        .AtLeast(1)
                        .Doc("a worker gone this long is dropped while minReplicas remain; at "
                             "minReplicas the job fails"),
                    Enum("batch", at(&E::batch), {"global", "perWorker"})
                        .Doc("global: the global batch (batchSize x replicas at the start) is cut "
                             "over each step's workers, so the result does not depend on how many "
                             "computed it; perWorker: not supported yet"),
                })
      .NoDefaultInCrd()
      .WrittenWhen([](const TrainingJobSpec& spec) { return spec.elastic.enabled(); })
      .Doc(
          "scale the workers of a running job (kubectl scale, kubeps scale) between minReplicas "
          "and maxReplicas; a job's own program follows the changes through the agent "
          "(kubeps.torch.steps)");
}

FieldSpec ScheduleField() {
  using L = LearningRateScheduleSpec;
  auto at = [](auto L::*member) {
    return At(&TrainingJobSpec::optimizer, &OptimizerSpec::schedule, member);
  };
  return Object("schedule",
                {
                    Integer("warmupSteps", at(&L::warmup_steps))
                        .AtLeast(0)
                        .Doc("updates over which the rate rises linearly to learningRate"),
                    Enum("decay", at(&L::decay), {"none", "cosine", "linear"})
                        .Doc("after the warmup, over decaySteps updates, to minLearningRate"),
                    Integer("decaySteps", at(&L::decay_steps))
                        .AtLeast(0)
                        .Doc("updates of the decay; required with a decay"),
                    Number("minLearningRate", at(&L::min_learning_rate))
                        .AtLeast(0)
                        .Doc("the rate after the decay; below learningRate"),
                })
      .NoDefaultInCrd()
      .WrittenWhen([](const TrainingJobSpec& spec) { return spec.optimizer.schedule.enabled(); })
      .Doc(
          "the learning rate by the update count of each tensor part a server holds (a sync step "
          "is one update, a skipped step none; in async mode each push is one), checkpointed "
          "with it: a resumed job goes on with the rates a run without the fault used");
}

std::vector<FieldSpec> OptimizerFields() {
  using O = OptimizerSpec;
  auto at = [](double O::*member) { return At(&TrainingJobSpec::optimizer, member); };
  return {
      Enum("name", At(&TrainingJobSpec::optimizer, &O::name), {"sgd", "momentum", "adam", "none"})
          .Doc("the update rule; none: the servers only average the gradients"),
      Number("learningRate", at(&O::learning_rate)).Above(0).Doc("step size"),
      Number("momentum", at(&O::momentum)).AtLeast(0).Below(1).Doc("momentum optimizer only"),
      Number("beta1", at(&O::beta1)).AtLeast(0).Below(1).Doc("adam only"),
      Number("beta2", at(&O::beta2)).AtLeast(0).Below(1).Doc("adam only"),
      Number("epsilon", at(&O::epsilon)).Above(0).Doc("adam only"),
      Number("weightDecay", at(&O::weight_decay))
          .AtLeast(0)
          .Doc("L2 penalty: weightDecay times the parameter is added to its gradient"),
      ScheduleField(),
  };
}

std::vector<FieldSpec> RunPolicyFields() {
  using R = RunPolicy;
  auto at = [](auto R::*member) { return At(&TrainingJobSpec::run_policy, member); };
  return {
      Enum("restartPolicy", at(&R::restart_policy),
           {RestartPolicy::kOnFailure, RestartPolicy::kNever, RestartPolicy::kExitCode})
          .Doc("ExitCode: only signal exits (128 and up) are retried"),
      Integer("backoffLimit", at(&R::backoff_limit))
          .AtLeast(0)
          .Doc("restarts allowed before the job fails"),
      Integer("activeDeadlineSeconds", at(&R::active_deadline_seconds))
          .AtLeast(1)
          .UnsetByDefault()
          .Doc("the job fails when it runs longer"),
      Integer("ttlSecondsAfterFinished", at(&R::ttl_seconds_after_finished))
          .AtLeast(0)
          .UnsetByDefault()
          .Doc("the finished job is deleted this long after it ends"),
      Integer("podStartTimeoutSeconds", at(&R::pod_start_timeout_seconds))
          .AtLeast(1)
          .UnsetByDefault()
          .Doc("a pod that still cannot start this long after its creation (ErrImagePull, "
               "ImagePullBackOff, InvalidImageName, CreateContainerConfigError, Unschedulable, "
               "FailedMount) fails the job (ImagePullFailed, Unschedulable, "
               "ContainerConfigInvalid, VolumeMountFailed); an unschedulable worker of an "
               "elastic job that has run counts from when the job needs it for minReplicas; "
               "unset: the job waits, its condition saying why. Kubernetes only"),
      // No default in the CRD (as before the table): the operator's Running
      // applies, and stored jobs do not gain the field.
      Enum("cleanPodPolicy", at(&R::clean_pod_policy),
           {CleanPodPolicy::kAll, CleanPodPolicy::kRunning, CleanPodPolicy::kNone})
          .NoDefaultInCrd()
          .Doc("which pods are deleted when the job ends"),
      Boolean("suspend", at(&R::suspend))
          .NoDefaultInCrd()
          .Doc("true deletes the job's pods and keeps the job"),
  };
}

std::vector<FieldSpec> SchedulingPolicyFields() {
  using S = SchedulingPolicy;
  auto at = [](auto S::*member) { return At(&TrainingJobSpec::scheduling_policy, member); };
  return {
      String("schedulerName", at(&S::scheduler_name))
          .Doc("when set, the pods use this scheduler and the operator creates a PodGroup"),
      Enum("podGroup", at(&S::pod_group), {"Volcano", "SchedulerPlugins", "None"})
          .UnsetByDefault()
          .Doc("the PodGroup API the scheduler reads; unset: Volcano for schedulerName volcano, "
               "SchedulerPlugins for scheduler-plugins-scheduler, required for any other"),
      Integer("minAvailable", at(&S::min_available))
          .AtLeast(0)
          .Doc("gang scheduling, pods that must start together; 0: every replica"),
      String("queue", at(&S::queue)).Doc("the PodGroup's queue"),
      String("priorityClass", at(&S::priority_class)).Doc("the PodGroup's priority class"),
  };
}

std::vector<FieldSpec> BuildSpecFields() {
  using S = TrainingJobSpec;
  return {
      Enum("mode", At(&S::mode), {SyncMode::kSync, SyncMode::kAsync})
          .Doc("sync: gradients of all workers averaged per step; async: applied on arrival"),
      // Unset: the job brings its own program (api/user_container.h); a
      // manifest with a data set and no model trains mlp, the default
      // before jobs could bring their own.
      Enum("model", At(&S::model), ModelNames())
          .UnsetByDefault()
          .Doc("a built-in model: " + ModelDescriptions() +
               ". Leave out (with dataset) to run your own program in the worker's container"),
      Object("dataset", {String("path", At(&S::dataset_path))
                             .Required()
                             .UnsetByDefault()
                             .Doc("folder holding the four Fashion-MNIST IDX .gz files")})
          .Doc("the built-in model's training and test images (mlp when no model is named)"),
      Object("optimizer", OptimizerFields()).Doc("applied on the parameter servers"),
      Integer("batchSize", At(&S::batch_size)).AtLeast(1).Doc("per worker"),
      Integer("epochs", At(&S::epochs)).AtLeast(1).Doc("passes over the training set"),
      Integer("seed", At(&S::seed)).Doc("parameter initialisation and data order"),
      Integer("bigArrayBound", At(&S::big_array_bound))
          .AtLeast(1)
          .Doc("elements; tensors at least this big are sliced over all servers"),
      Integer("resendTimeoutMs", At(&S::resend_timeout_ms))
          .AtLeast(1)
          .Doc("how long a request waits for its answer before it is sent again"),
      Integer("maxResends", At(&S::max_resends))
          .AtLeast(0)
          .Doc("0 disables resending, and waiting for a server that answers none"),
      Integer("progressIntervalMs", At(&S::progress_interval_ms))
          .AtLeast(100)
          .Doc("how often workers print a progress line"),
      Integer("gpusPerWorker", At(&S::gpus_per_worker)).AtLeast(0).Doc("GPUs of each worker pod"),
      Enum("backend", At(&S::backend), {"cpu", "cuda", "auto"})
          .Doc("auto: cuda when the worker sees a GPU"),
      Enum("nonFinite", At(&S::non_finite), {"Fail", "SkipStep"})
          .Doc("a NaN or Inf gradient at a parameter server: Fail refuses it and fails the job "
               "(a rerun would diverge again); SkipStep skips that step's update and counts it "
               "(kubeps_server_updates_skipped_total); with optimizer none the servers hand the "
               "mean on as it is and the program's optimizer skips the step (a mixed-precision "
               "loss scaler: python/README.md)"),
      Object("compression",
             {
                 Enum("type", At(&S::compression), {"none", "fp16", "bf16", "2bit"})
                     .Doc("none: float32; fp16, bf16: 16-bit floats, half the bytes (fp16 "
                          "overflows past 65504, bf16 keeps float32's range); 2bit: a sixteenth, "
                          "each value sent as +threshold, -threshold or 0, the rest kept on the "
                          "worker for later steps (error feedback)"),
                 Number("threshold", At(&S::compression_threshold))
                     .Above(0)
                     .Doc("2bit only: the magnitude a code stands for"),
             })
          .Doc("how gradients travel to the parameter servers; they accumulate and update in "
               "float32, and parameters come back in float32"),
      Object("checkpoint",
             {
                 String("path", At(&S::checkpoint_path))
                     .Doc("where shards write parameters and optimizer state"),
                 Integer("intervalSteps", At(&S::checkpoint_interval_steps))
                     .AtLeast(1)
                     .Doc("steps between two checkpoints of a shard"),
                 Boolean("resume", At(&S::checkpoint_resume))
                     .Doc("a job started over an earlier run's checkpoints resumes from the "
                          "newest step every shard holds; false: delete them, start fresh"),
             })
          .Doc("a restarted shard reloads its newest checkpoint"),
      Object("security",
             {
                 Enum("tls", At(&S::tls), {"Enabled", "Disabled"})
                     .UnsetByDefault()
                     .Doc("mutual TLS between the job's pods, with a CA of the job's own and a "
                          "certificate per replica (issued by cert-manager where the cluster "
                          "runs it: --tls-issuer); unset: the operator's default (--tls, on "
                          "in the Helm chart), off in kubeps run"),
             })
          .Doc("how the job's pods reach each other; the job's token is always checked"),
      Object("runPolicy", RunPolicyFields())
          .Doc("restarts, deadlines and the clean-up of the job's pods"),
      // No defaults in the CRD: a job without gang scheduling keeps no
      // schedulingPolicy in the API server (as before the table).
      Object("schedulingPolicy", SchedulingPolicyFields())
          .NoDefaultInCrd()
          .Doc("gang scheduling (Volcano or scheduler-plugins)"),
      Object(
          "replicaSpecs",
          {
              Replica("ps", &S::ps, "a pod template merged into the pods of this role")
                  .Doc("the parameter servers"),
              Replica("worker", &S::worker,
                      "a pod template merged into the pods of this role. Its container "
                      "named worker (or its only one) runs the built-in model, or, without "
                      "spec.model, your training program: name, image, command, args, env, "
                      "workingDir, resources, volumeMounts as in any pod; kubeps adds its "
                      "agent beside it as the sidecar kubeps-agent",
                      {ElasticPolicyField()})
                  .Doc("the workers"),
              Object("scheduler",
                     {
                         Rejected("replicas",
                                  "the scheduler is always exactly one replica: give only its "
                                  "template"),
                         PodTemplate("template", At(&S::scheduler, &ReplicaSpec::template_override))
                             .Doc("a pod template merged into the scheduler's pod (resources, "
                                  "securityContext, tolerations, nodeSelector...)"),
                     })
                  .Doc("the scheduler: always one replica, its template optional"),
          })
          .Doc("the parameter servers, the workers and, optionally, the scheduler's template"),
  };
}

}  // namespace

const std::vector<FieldSpec>& TrainingJobSpecFields() {
  static const std::vector<FieldSpec> fields = BuildSpecFields();
  return fields;
}

}  // namespace kubeps::api
