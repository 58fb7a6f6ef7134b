// ParseTrainingJob: a TrainingJob manifest, read and validated field by
// field. The envelope (apiVersion, kind, metadata) is read here; the spec
// through its field table (training_job_schema.cc). Pure syntax and range
// checks only (no file system, no cluster), so the CLI, the operator and
// every pod run exactly the same code.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "api/manifest_reader.h"
#include "api/spec_rules.h"
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

// An elastic policy's bounds hold the replicas, and what it does not do yet
// is refused rather than ignored.
void CheckElasticPolicy(const TrainingJobSpec& spec, std::vector<FieldError>* errors) {
  const std::string field = "spec.replicaSpecs.worker.elasticPolicy";
  const ElasticPolicy& policy = spec.elastic;
  if (!policy.enabled()) return;
  for (const FieldError& error : *errors) {
    if (error.field.rfind(field, 0) == 0) return;  // a bad value, already said
  }
  const int replicas = spec.worker.replicas;
  if (policy.min_replicas == 0) {
    errors->push_back({field + ".minReplicas", kRequiredWithMaxReplicas});
  } else if (policy.max_replicas == 0) {
    errors->push_back({field + ".maxReplicas", kRequiredWithMinReplicas});
  } else if (policy.min_replicas > policy.max_replicas) {
    errors->push_back({field, "minReplicas (" + std::to_string(policy.min_replicas) +
                                  ") is above maxReplicas (" + std::to_string(policy.max_replicas) +
                                  ")"});
  } else if (replicas < policy.min_replicas || replicas > policy.max_replicas) {
    errors->push_back({"spec.replicaSpecs.worker.replicas",
                       std::to_string(replicas) + " is outside elasticPolicy's [" +
                           std::to_string(policy.min_replicas) + ", " +
                           std::to_string(policy.max_replicas) + "]"});
  }
  if (policy.batch == "perWorker") {
    errors->push_back({field + ".batch", kPerWorkerUnsupported});
  }
  if (spec.brings_own_program() && spec.optimizer.name == "none") {
    // A worker taken in later pulls the servers' parameters; with `none`
    // they hold only the mean gradient, and the parameters and optimizer
    // state live in each program, which a newcomer has not got.
    errors->push_back({"spec.optimizer.name",
                       "none cannot be elastic: a worker taken in while the job trains starts "
                       "from the servers' parameters, and with none the servers hold only the "
                       "averaged gradients (the parameters and optimizer state are each "
                       "program's): use the servers' optimizer (sgd, momentum or adam), or "
                       "leave out elasticPolicy"});
  }
  // The global batch is batchSize x the replicas at the start, at least
  // this: checked so, the spec of a job scaled since stays valid.
  const int64_t smallest_batch = int64_t{spec.batch_size} * policy.min_replicas;
  if (policy.min_replicas > 0 && policy.max_replicas > smallest_batch) {
    errors->push_back({field + ".maxReplicas", std::to_string(policy.max_replicas) +
                                                   " workers cannot share a global batch of " +
                                                   std::to_string(smallest_batch) +
                                                   " (batchSize x minReplicas)"});
  }
}

// A schedule says how it decays and stays below the peak; the servers'
// optimizer none has no rate to schedule.
void CheckSchedule(const OptimizerSpec& optimizer, std::vector<FieldError>* errors) {
  const std::string field = "spec.optimizer.schedule";
  const LearningRateScheduleSpec& schedule = optimizer.schedule;
  for (const FieldError& error : *errors) {
    if (error.field.rfind(field, 0) == 0) return;  // a bad value, already said
  }
  if (schedule.decay == "none" && (schedule.decay_steps > 0 || schedule.min_learning_rate > 0)) {
    errors->push_back({field + ".decay", kDecayNoneButGiven});
  } else if (!schedule.enabled()) {
    return;
  } else if (optimizer.name == "none") {
    errors->push_back({field, kNoRateToSchedule});
  } else if (schedule.decay != "none" && schedule.decay_steps == 0) {
    errors->push_back({field + ".decaySteps", "required with decay " + Quote(schedule.decay)});
  } else if (schedule.decay != "none" && schedule.min_learning_rate >= optimizer.learning_rate) {
    std::ostringstream message;
    message << schedule.min_learning_rate << " is not below spec.optimizer.learningRate ("
            << optimizer.learning_rate << "): nothing to decay";
    errors->push_back({field + ".minLearningRate", message.str()});
  }
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
    CheckElasticPolicy(job->spec, errors);
    CheckSchedule(job->spec.optimizer, errors);
  } else {
    top.AddError("spec", "required");
  }
  top.Allow({"status"});  // written by the operator, never read back
  top.Finish();
}

// The first byte of `text` that is not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), as
// "line L, column C: ..." with C counted in characters; "" when all is UTF-8.
std::string FirstNonUtf8Byte(const std::string& text) {
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char b = byte(i);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
    if (b < 0x80) {
      length = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) low = 0xA0;   // overlong
      if (b == 0xED) high = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) low = 0x90;   // overlong
      if (b == 0xF4) high = 0x8F;  // past U+10FFFF
    }
    bool ok = length > 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k) {
      const unsigned char c = byte(i + k);
      ok = k == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": byte " +
             hex + " is not UTF-8 (a manifest is UTF-8 text)";
    }
    if (b == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
  return "";
}

// yaml-cpp's LoadAll never ends on a ',' outside brackets at the top level:
// the parser answers one empty document after another without moving on,
// and memory grows without bound. So the documents are counted first,
// without building them, and a text with more than kMaxDocuments is refused.
// (One non-empty document is all a manifest may hold.)
constexpr int kMaxDocuments = 64;

class IgnoreEvents : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Throws what LoadAll would throw for bad syntax.
bool EndsWithinDocumentLimit(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  IgnoreEvents ignore;
  for (int documents = 0; parser.HandleNextDocument(ignore);) {
    if (++documents > kMaxDocuments) return false;
  }
  return true;
}

}  // namespace

ParseResult ParseTrainingJob(const std::string& yaml_text) {
  ParseResult result;
  // Before YAML: yaml-cpp takes such bytes into strings, and the job's
  // canonical JSON, which every process and the API server get, cannot hold them.
  if (std::string where = FirstNonUtf8Byte(yaml_text); !where.empty()) {
    result.errors.push_back({"", where});
    return result;
  }
  std::vector<YAML::Node> documents;
  try {
    if (!EndsWithinDocumentLimit(yaml_text)) {
      result.errors.push_back({"", "invalid YAML: the text does not end after " +
                                       std::to_string(kMaxDocuments) +
                                       " documents (a ',' outside [ ] or { } at the top level "
                                       "reads as endless empty ones)"});
      return result;
    }
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
