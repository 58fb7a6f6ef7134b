// TrainingJob: file reading, error reports and the canonical JSON form.
// Parsing and validation live in training_job_parse.cc.
#include "api/training_job.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "api/manifest_reader.h"

namespace kubeps::api {

const char* ToString(SyncMode mode) {
  switch (mode) {
    case SyncMode::kSync:
      return "sync";
    case SyncMode::kAsync:
      return "async";
  }
  return "sync";
}

const char* ToString(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::kOnFailure:
      return "OnFailure";
    case RestartPolicy::kNever:
      return "Never";
    case RestartPolicy::kExitCode:
      return "ExitCode";
  }
  return "OnFailure";
}

const char* ToString(CleanPodPolicy policy) {
  switch (policy) {
    case CleanPodPolicy::kAll:
      return "All";
    case CleanPodPolicy::kRunning:
      return "Running";
    case CleanPodPolicy::kNone:
      return "None";
  }
  return "Running";
}

std::string ParseResult::ErrorReport(const std::string& source) const {
  std::string report;
  for (const auto& error : errors) {
    if (!source.empty()) report += source + ": ";
    // Whole-document problems (syntax, empty file) have no field.
    if (!error.field.empty()) report += error.field + ": ";
    report += error.message + "\n";
  }
  return report;
}

ParseResult ParseTrainingJobFile(const std::string& path) {
  auto fail = [&](const std::string& why) {
    ParseResult result;
    result.errors.push_back({"", "cannot read " + internal::Quote(path) + ": " + why});
    return result;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return fail("is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail(std::strerror(errno));
  return ParseTrainingJob(text.str());
}

namespace {

nlohmann::json RunPolicyToJson(const RunPolicy& p) {
  nlohmann::json out = {{"restartPolicy", ToString(p.restart_policy)},
                        {"backoffLimit", p.backoff_limit},
                        {"cleanPodPolicy", ToString(p.clean_pod_policy)},
                        {"suspend", p.suspend}};
  if (p.active_deadline_seconds > 0) out["activeDeadlineSeconds"] = p.active_deadline_seconds;
  if (p.ttl_seconds_after_finished >= 0)
    out["ttlSecondsAfterFinished"] = p.ttl_seconds_after_finished;
  return out;
}

nlohmann::json ReplicaToJson(const ReplicaSpec& replica) {
  nlohmann::json out = {{"replicas", replica.replicas}};
  if (!replica.template_override.is_null()) out["template"] = replica.template_override;
  return out;
}

}  // namespace

nlohmann::json ToJson(const TrainingJob& job) {
  const TrainingJobSpec& s = job.spec;
  const OptimizerSpec& o = s.optimizer;
  nlohmann::json optimizer = {
      {"name", o.name},
      {"learningRate", o.learning_rate},
      {"momentum", o.momentum},
      {"beta1", o.beta1},
      {"beta2", o.beta2},
      {"epsilon", o.epsilon},
      {"weightDecay", o.weight_decay},
  };
  nlohmann::json spec = {
      {"mode", ToString(s.mode)},
      {"model", s.model},
      {"dataset", {{"path", s.dataset_path}}},
      {"optimizer", optimizer},
      {"batchSize", s.batch_size},
      {"epochs", s.epochs},
      {"seed", s.seed},
      {"bigArrayBound", s.big_array_bound},
      {"resendTimeoutMs", s.resend_timeout_ms},
      {"maxResends", s.max_resends},
      {"progressIntervalMs", s.progress_interval_ms},
      {"gpusPerWorker", s.gpus_per_worker},
      {"backend", s.backend},
      {"checkpoint", {{"path", s.checkpoint_path}, {"intervalSteps", s.checkpoint_interval_steps}}},
      {"runPolicy", RunPolicyToJson(s.run_policy)},
      {"schedulingPolicy",
       {{"schedulerName", s.scheduling_policy.scheduler_name},
        {"minAvailable", s.scheduling_policy.min_available},
        {"queue", s.scheduling_policy.queue},
        {"priorityClass", s.scheduling_policy.priority_class}}},
      // The scheduler is implicit and never written.
      {"replicaSpecs", {{"ps", ReplicaToJson(s.ps)}, {"worker", ReplicaToJson(s.worker)}}},
  };
  return {
      {"apiVersion", kApiVersion},
      {"kind", kKind},
      {"metadata", {{"name", job.name}, {"namespace", job.namespace_}}},
      {"spec", spec},
  };
}

}  // namespace kubeps::api
