// TrainingJob: file reading, error reports and the canonical JSON form
// (written through the spec's field table). Parsing and validation live in
// training_job_parse.cc.
#include "api/training_job.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "api/manifest_reader.h"
#include "api/training_job_schema.h"

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

std::string PodGroupApi(const SchedulingPolicy& policy) {
  if (!policy.pod_group.empty()) return policy.pod_group;
  if (policy.scheduler_name == "volcano") return "Volcano";
  if (policy.scheduler_name == "scheduler-plugins-scheduler") return "SchedulerPlugins";
  return "";
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

nlohmann::json ToJson(const TrainingJob& job) {
  return {
      {"apiVersion", kApiVersion},
      {"kind", kKind},
      {"metadata", {{"name", job.name}, {"namespace", job.namespace_}}},
      {"spec", WriteFields(TrainingJobSpecFields(), job.spec)},
  };
}

}  // namespace kubeps::api
