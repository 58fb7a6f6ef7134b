// ParseTrainingJob: a TrainingJob manifest, read and validated field by
// field. The envelope (apiVersion, kind, metadata) is read here; the spec
// through its field table (training_job_schema.cc). Pure syntax and range
// checks only (no file system, no cluster), so the CLI, the operator and
// every pod run exactly the same code.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "api/manifest_reader.h"
#include "api/training_job.h"
#include "api/training_job_schema.h"
#include "api/user_container.h"

namespace kubeps::api {
namespace {

using internal::Describe;
using internal::MapReader;
using internal::Quote;
using internal::ReadTrainingProgram;

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

// A scheduler other than the two whose names are known must say which
// PodGroup API it reads.
void CheckPodGroupApi(const SchedulingPolicy& policy, std::vector<FieldError>* errors) {
  const std::string field = "spec.schedulingPolicy.podGroup";
  if (policy.scheduler_name.empty() || !PodGroupApi(policy).empty()) return;
  for (const FieldError& error : *errors) {
    if (error.field == field) return;  // a bad value, already said
  }
  errors->push_back(
      {field, "required for schedulerName " + Quote(policy.scheduler_name) +
                  ": say which PodGroup API it reads (Volcano, SchedulerPlugins, or None "
                  "for no PodGroup)"});
}

void ReadTrainingJob(const YAML::Node& root, TrainingJob* job, std::vector<FieldError>* errors) {
  MapReader top(root, "", errors);
  ReadConstant(top, "apiVersion", kApiVersion);
  ReadConstant(top, "kind", kKind);
  ReadMetadata(top.Get("metadata"), job, errors);
  if (top.Has("spec")) {
    ReadFields(TrainingJobSpecFields(), top.Get("spec"), "spec", errors, &job->spec);
    ReadTrainingProgram(top.Get("spec"), &job->spec, errors);
    CheckPodGroupApi(job->spec.scheduling_policy, errors);
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
