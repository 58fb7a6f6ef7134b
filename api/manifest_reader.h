// Building blocks for reading a YAML manifest field by field while collecting
// every problem as a FieldError. Nothing here knows the TrainingJob schema;
// field_spec.cc reads the schema's fields with these pieces.
//
// Conventions:
//  * an absent key and an explicit null (`key:` or `key: null`) both mean
//    "not set": the default stays in place;
//  * numbers must be plain YAML numbers; a quoted "3" is a string, as it is
//    for the Kubernetes API server;
//  * on any error the output is left untouched, so reading goes on and later
//    fields are still checked.
//
// Not thread-safe: one MapReader reads one mapping, on one thread.
#ifndef KUBEPS_API_MANIFEST_READER_H_
#define KUBEPS_API_MANIFEST_READER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "api/training_job.h"

namespace kubeps::api::internal {

// "parent.key", or "key" when parent is empty.
std::string JoinPath(const std::string& parent, const std::string& key);

// A value as it should appear in a message: numbers, booleans and null as
// written, strings in double quotes, "a mapping" / "a list" otherwise.
std::string Describe(const YAML::Node& node);

// A string in double quotes, with JSON escaping.
std::string Quote(const std::string& text);

// Damerau-Levenshtein (optimal string alignment) distance.
size_t EditDistance(const std::string& a, const std::string& b);

// The candidate `word` was most likely meant to be, if one is close enough:
// equal ignoring case, '-' and '_', or within a small edit distance.
std::optional<std::string> Suggest(const std::string& word,
                                   const std::vector<std::string>& candidates);

// Scalar grammar of the YAML 1.2 core schema (plain scalars only).
bool IsPlain(const YAML::Node& node);  // a scalar written without quotes or tag
bool LooksLikeInteger(const std::string& text);
bool LooksLikeFloat(const std::string& text);  // includes .inf and .nan

// Parses a float of the core schema exactly (locale independent).
std::optional<double> ParseDouble(const std::string& text);

// Converts a YAML subtree to JSON with core-schema typing of plain scalars.
// Non-scalar mapping keys are reported as errors under `path`.
nlohmann::json YamlToJson(const YAML::Node& node, const std::string& path,
                          std::vector<FieldError>* errors);

// One YAML mapping of the manifest. Every key looked up through Get (or
// declared with Allow) is known; Finish reports the others as unknown
// fields, with a suggestion among the known keys.
class MapReader {
 public:
  // `node` may be undefined or null, which reads as an empty mapping. Any
  // other non-mapping is reported once and also reads as empty.
  MapReader(const YAML::Node& node, std::string path, std::vector<FieldError>* errors);

  const std::string& path() const { return path_; }
  std::string FieldPath(const std::string& key) const { return JoinPath(path_, key); }
  bool is_mapping() const { return is_mapping_; }
  void AddError(const std::string& key, const std::string& message) const;

  // The value of `key`; an undefined node when absent. Marks `key` known.
  YAML::Node Get(const std::string& key);
  // True when `key` is present with a non-null value. Marks `key` known.
  bool Has(const std::string& key);
  // Marks keys as known without reading them (accepted and ignored).
  void Allow(const std::vector<std::string>& keys);

  // Typed readers. `required` reports "required" when absent or null.
  bool ReadString(const std::string& key, std::string* out, bool required = false);
  bool ReadEnum(const std::string& key, const std::vector<std::string>& allowed, std::string* out);
  bool ReadBool(const std::string& key, bool* out);
  bool ReadInt(const std::string& key, int* out, int64_t min);
  bool ReadInt64(const std::string& key, int64_t* out, int64_t min);
  bool ReadUint64(const std::string& key, uint64_t* out);
  // A finite number with min <= value (min < value when min_exclusive) and
  // value < max_exclusive when given.
  bool ReadDouble(const std::string& key, double* out, double min, bool min_exclusive,
                  std::optional<double> max_exclusive = std::nullopt);

  // Reports unknown and duplicate keys. Call after all Get/Allow calls.
  void Finish();

 private:
  // Integer parsing shared by the int readers: nullopt after an error.
  std::optional<int64_t> ReadIntegerIn(const std::string& key, int64_t min, int64_t max);
  void MissingRequired(const std::string& key) const;

  YAML::Node node_;
  std::string path_;
  std::vector<FieldError>* errors_;
  bool is_mapping_ = false;
  bool bad_type_ = false;           // present but not a mapping (already reported)
  std::vector<std::string> known_;  // in lookup order, for suggestions
  std::set<std::string> known_set_;
};

}  // namespace kubeps::api::internal

#endif  // KUBEPS_API_MANIFEST_READER_H_
