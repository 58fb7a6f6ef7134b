// ParseTrainingJob: the TrainingJob schema, read and validated field by
// field. Pure syntax and range checks only (no file system, no cluster), so
// the CLI, the operator and every pod run exactly the same code.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "api/manifest_reader.h"
#include "api/training_job.h"

namespace kubeps::api {
namespace {

using internal::Describe;
using internal::MapReader;
using internal::Quote;

constexpr size_t kMaxLabelLength = 63;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// RFC 1123 label; a DNS-1035 label must also start with a letter.
bool IsDnsLabel(const std::string& s, bool must_start_with_letter) {
  if (s.empty() || s.size() > kMaxLabelLength) return false;
  if (must_start_with_letter ? !(s.front() >= 'a' && s.front() <= 'z') : !IsLowerAlnum(s.front())) {
    return false;
  }
  if (!IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

void CheckDnsLabel(MapReader& reader, const std::string& key, const std::string& value,
                   bool dns1035) {
  if (value.size() > kMaxLabelLength) {
    reader.AddError(key, "must be at most 63 characters, got " + std::to_string(value.size()));
    return;
  }
  if (IsDnsLabel(value, dns1035)) return;
  reader.AddError(key, std::string("must be a ") + (dns1035 ? "DNS-1035" : "DNS-1123") +
                           " label (lowercase letters, digits and '-', starting with a " +
                           (dns1035 ? "letter" : "letter or digit") +
                           " and ending with a letter or digit), got " + Quote(value));
}

// A required scalar with one fixed value (apiVersion, kind).
void ReadConstant(MapReader& top, const std::string& key, const std::string& expected) {
  YAML::Node value = top.Get(key);
  if (!value.IsDefined() || value.IsNull()) {
    top.AddError(key, "required (expected " + Quote(expected) + ")");
  } else if (!value.IsScalar() || value.Scalar() != expected) {
    top.AddError(key, "must be " + Quote(expected) + ", got " + Describe(value));
  }
}

void ReadMetadata(const YAML::Node& node, TrainingJob* job, std::vector<FieldError>* errors) {
  MapReader meta(node, "metadata", errors);
  if (meta.ReadString("name", &job->name, /*required=*/true)) {
    CheckDnsLabel(meta, "name", job->name, /*dns1035=*/true);
  }
  std::string ns;
  if (meta.ReadString("namespace", &ns)) {
    CheckDnsLabel(meta, "namespace", ns, /*dns1035=*/false);
    job->namespace_ = ns;
  }
  // Accepted and ignored: what users attach, and what the API server adds
  // when the operator reads the object back.
  meta.Allow({"labels", "annotations", "uid", "resourceVersion", "generation", "creationTimestamp",
              "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "ownerReferences",
              "finalizers", "generateName", "selfLink"});
  meta.Finish();
}

void ReadOptimizer(const YAML::Node& node, OptimizerSpec* opt, std::vector<FieldError>* errors) {
  MapReader o(node, "spec.optimizer", errors);
  o.ReadEnum("name", {"sgd", "momentum", "adam", "none"}, &opt->name);
  o.ReadDouble("learningRate", &opt->learning_rate, 0.0, /*min_exclusive=*/true);
  o.ReadDouble("momentum", &opt->momentum, 0.0, false, 1.0);
  o.ReadDouble("beta1", &opt->beta1, 0.0, false, 1.0);
  o.ReadDouble("beta2", &opt->beta2, 0.0, false, 1.0);
  o.ReadDouble("epsilon", &opt->epsilon, 0.0, /*min_exclusive=*/true);
  o.ReadDouble("weightDecay", &opt->weight_decay, 0.0, /*min_exclusive=*/false);
  o.Finish();
}

void ReadReplica(const YAML::Node& node, const std::string& path, ReplicaSpec* replica,
                 std::vector<FieldError>* errors) {
  MapReader r(node, path, errors);
  r.ReadInt("replicas", &replica->replicas, 1);
  YAML::Node tmpl = r.Get("template");
  if (tmpl.IsDefined() && !tmpl.IsNull()) {
    if (!tmpl.IsMap()) {
      r.AddError("template", "must be a mapping (a pod template), got " + Describe(tmpl));
    } else {
      replica->template_override = internal::YamlToJson(tmpl, r.FieldPath("template"), errors);
    }
  }
  r.Finish();
}

void ReadReplicaSpecs(const YAML::Node& node, TrainingJobSpec* spec,
                      std::vector<FieldError>* errors) {
  MapReader r(node, "spec.replicaSpecs", errors);
  ReadReplica(r.Get("ps"), r.FieldPath("ps"), &spec->ps, errors);
  ReadReplica(r.Get("worker"), r.FieldPath("worker"), &spec->worker, errors);
  if (r.Get("scheduler").IsDefined()) {
    r.AddError("scheduler",
               "the scheduler is implicit (always exactly one replica); only \"ps\" and "
               "\"worker\" may be listed");
  }
  r.Finish();
}

void ReadRunPolicy(const YAML::Node& node, RunPolicy* policy, std::vector<FieldError>* errors) {
  MapReader r(node, "spec.runPolicy", errors);
  std::string restart;
  if (r.ReadEnum("restartPolicy", {"OnFailure", "Never", "ExitCode"}, &restart)) {
    policy->restart_policy = restart == "OnFailure" ? RestartPolicy::kOnFailure
                             : restart == "Never"   ? RestartPolicy::kNever
                                                    : RestartPolicy::kExitCode;
  }
  r.ReadInt("backoffLimit", &policy->backoff_limit, 0);
  r.ReadInt64("activeDeadlineSeconds", &policy->active_deadline_seconds, 1);
  r.ReadInt64("ttlSecondsAfterFinished", &policy->ttl_seconds_after_finished, 0);
  std::string clean;
  if (r.ReadEnum("cleanPodPolicy", {"All", "Running", "None"}, &clean)) {
    policy->clean_pod_policy = clean == "All"       ? CleanPodPolicy::kAll
                               : clean == "Running" ? CleanPodPolicy::kRunning
                                                    : CleanPodPolicy::kNone;
  }
  r.ReadBool("suspend", &policy->suspend);
  r.Finish();
}

void ReadSchedulingPolicy(const YAML::Node& node, SchedulingPolicy* policy,
                          std::vector<FieldError>* errors) {
  MapReader r(node, "spec.schedulingPolicy", errors);
  r.ReadString("schedulerName", &policy->scheduler_name);
  r.ReadInt("minAvailable", &policy->min_available, 0);
  r.ReadString("queue", &policy->queue);
  r.ReadString("priorityClass", &policy->priority_class);
  r.Finish();
}

void ReadSpec(const YAML::Node& node, TrainingJobSpec* spec, std::vector<FieldError>* errors) {
  MapReader s(node, "spec", errors);
  std::string mode;
  if (s.ReadEnum("mode", {"sync", "async"}, &mode)) {
    spec->mode = mode == "sync" ? SyncMode::kSync : SyncMode::kAsync;
  }
  s.ReadEnum("model", {"softmax", "mlp", "cnn"}, &spec->model);
  {
    MapReader dataset(s.Get("dataset"), "spec.dataset", errors);
    dataset.ReadString("path", &spec->dataset_path, /*required=*/true);
    dataset.Finish();
  }
  ReadOptimizer(s.Get("optimizer"), &spec->optimizer, errors);
  s.ReadInt("batchSize", &spec->batch_size, 1);
  s.ReadInt("epochs", &spec->epochs, 1);
  s.ReadUint64("seed", &spec->seed);
  s.ReadInt64("bigArrayBound", &spec->big_array_bound, 1);
  s.ReadInt("resendTimeoutMs", &spec->resend_timeout_ms, 1);
  s.ReadInt("maxResends", &spec->max_resends, 0);
  s.ReadInt("progressIntervalMs", &spec->progress_interval_ms, 100);
  s.ReadInt("gpusPerWorker", &spec->gpus_per_worker, 0);
  s.ReadEnum("backend", {"cpu", "cuda", "auto"}, &spec->backend);
  {
    MapReader checkpoint(s.Get("checkpoint"), "spec.checkpoint", errors);
    checkpoint.ReadString("path", &spec->checkpoint_path, /*required=*/false);
    checkpoint.ReadInt("intervalSteps", &spec->checkpoint_interval_steps, 1);
    checkpoint.Finish();
  }
  ReadRunPolicy(s.Get("runPolicy"), &spec->run_policy, errors);
  ReadSchedulingPolicy(s.Get("schedulingPolicy"), &spec->scheduling_policy, errors);
  ReadReplicaSpecs(s.Get("replicaSpecs"), spec, errors);
  s.Finish();
}

void ReadTrainingJob(const YAML::Node& root, TrainingJob* job, std::vector<FieldError>* errors) {
  MapReader top(root, "", errors);
  ReadConstant(top, "apiVersion", kApiVersion);
  ReadConstant(top, "kind", kKind);
  ReadMetadata(top.Get("metadata"), job, errors);
  if (top.Has("spec")) {
    ReadSpec(top.Get("spec"), &job->spec, errors);
  } else {
    top.AddError("spec", "required");
  }
  top.Allow({"status"});  // written by the operator, never read back
  top.Finish();
}

}  // namespace

ParseResult ParseTrainingJob(const std::string& yaml_text) {
  ParseResult result;
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(yaml_text);
  } catch (const YAML::ParserException& e) {
    result.errors.push_back({"", "invalid YAML at line " + std::to_string(e.mark.line + 1) +
                                     ", column " + std::to_string(e.mark.column + 1) + ": " +
                                     e.msg});
    return result;
  } catch (const YAML::Exception& e) {
    result.errors.push_back({"", std::string("invalid YAML: ") + e.what()});
    return result;
  }
  // Empty documents (a lone "---", a trailing separator) do not count.
  std::vector<YAML::Node> nonempty;
  for (const auto& doc : documents) {
    if (doc.IsDefined() && !doc.IsNull()) nonempty.push_back(doc);
  }
  if (nonempty.empty()) {
    result.errors.push_back({"", "the manifest is empty (expected one TrainingJob document)"});
    return result;
  }
  if (nonempty.size() > 1) {
    result.errors.push_back({"", "expected exactly one YAML document (a TrainingJob), found " +
                                     std::to_string(nonempty.size())});
    return result;
  }
  const YAML::Node& root = nonempty.front();
  if (!root.IsMap()) {
    result.errors.push_back(
        {"", "the manifest must be a mapping with apiVersion, kind, metadata and spec, got " +
                 Describe(root)});
    return result;
  }
  TrainingJob job;
  try {
    ReadTrainingJob(root, &job, &result.errors);
  } catch (const YAML::Exception& e) {
    result.errors.push_back({"", std::string("cannot read the manifest: ") + e.what()});
  }
  if (result.errors.empty()) result.job = std::move(job);
  return result;
}

}  // namespace kubeps::api
