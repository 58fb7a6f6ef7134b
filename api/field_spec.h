// FieldSpec: one field of the TrainingJob's spec, described once. The table
// of them (TrainingJobSpecFields in training_job_schema.h) is the single
// source of the schema: the parser reads and checks a manifest through it,
// ToJson writes the canonical form through it, and the CRD's
// openAPIV3Schema and the README's field table are generated from it
// (crd.h). A field's default is the default member initializer of its C++
// member; the table says which member that is, so a default is written once.
//
// Built with the small constructors below, e.g.
//
//   Integer("batchSize", At(&TrainingJobSpec::batch_size)).AtLeast(1).Doc("per worker")
//
// Plain values, built once and then only read: safe from any thread.
#ifndef KUBEPS_API_FIELD_SPEC_H_
#define KUBEPS_API_FIELD_SPEC_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "api/training_job.h"

namespace kubeps::api {

namespace internal {
class MapReader;
}  // namespace internal

enum class FieldType { kString, kInteger, kNumber, kBoolean, kObject, kPodTemplate };

// The C++ integer behind an integer field: its range, and the CRD's format.
enum class IntegerWidth { kInt32, kInt64, kUint64 };

struct FieldSpec {
  // Reads the field from `parent` (a mapping reader of the field's parent)
  // into the spec, reporting problems through it; leaves the spec untouched
  // on any error. Set for every field but objects, which the walker reads.
  using Reader = std::function<void(internal::MapReader& parent, const FieldSpec& field,
                                    std::vector<FieldError>* errors, TrainingJobSpec* spec)>;
  // The field's value in `spec`, as JSON.
  using Writer = std::function<nlohmann::json(const TrainingJobSpec& spec)>;

  std::string name;  // as the manifest spells it
  FieldType type = FieldType::kString;
  std::string description;

  // Checks. `required`: present, not null, and for strings not empty. On an
  // object it only puts the object in the CRD's `required` list; the parser
  // reports the missing fields inside it instead (one error, not two).
  bool required = false;
  IntegerWidth width = IntegerWidth::kInt32;
  std::optional<double> minimum;
  bool exclusive_minimum = false;
  std::optional<double> exclusive_maximum;  // numbers only
  std::vector<std::string> allowed;         // enums: the values, in message order

  // The default means "not set": ToJson leaves the field out and the CRD
  // states no default (activeDeadlineSeconds 0, a missing pod template).
  bool unset_by_default = false;
  // The CRD states no default for this field or, on an object, for any field
  // below it: the API server stores only what the user wrote, and the
  // operator's parser supplies the default.
  bool no_default_in_crd = false;
  // Non-empty: writing the field at all is an error with this message. Such
  // a field is not in the CRD (the API server drops unknown fields).
  std::string rejected_because;

  std::vector<FieldSpec> fields;  // objects: their fields, in reading order
  // Objects: when set and false for a spec, ToJson leaves the object out
  // (an optional policy whose absence means "off").
  std::function<bool(const TrainingJobSpec& spec)> written_when;
  Reader read;
  Writer write;

  // Builder steps, for the table's readability.
  FieldSpec& Doc(std::string text) {
    description = std::move(text);
    return *this;
  }
  FieldSpec& Required() {
    required = true;
    return *this;
  }
  FieldSpec& AtLeast(double value) {
    minimum = value;
    return *this;
  }
  FieldSpec& Above(double value) {
    minimum = value;
    exclusive_minimum = true;
    return *this;
  }
  FieldSpec& Below(double value) {
    exclusive_maximum = value;
    return *this;
  }
  FieldSpec& UnsetByDefault() {
    unset_by_default = true;
    return *this;
  }
  FieldSpec& NoDefaultInCrd() {
    no_default_in_crd = true;
    return *this;
  }
  FieldSpec& WrittenWhen(std::function<bool(const TrainingJobSpec& spec)> predicate) {
    written_when = std::move(predicate);
    return *this;
  }
};

// Where a field lives in the spec: a chain of data members starting at
// TrainingJobSpec, e.g. At(&TrainingJobSpec::optimizer, &OptimizerSpec::name).
template <typename T>
using Access = std::function<T&(TrainingJobSpec&)>;

namespace internal {
template <typename Struct, typename Member, typename... Rest>
auto& Follow(Struct& object, Member member, Rest... rest) {
  if constexpr (sizeof...(Rest) == 0) {
    return object.*member;
  } else {
    return Follow(object.*member, rest...);
  }
}
}  // namespace internal

template <typename... Members>
auto At(Members... path) {
  using T = std::remove_reference_t<decltype(internal::Follow(std::declval<TrainingJobSpec&>(),
                                                              path...))>;
  return Access<T>([=](TrainingJobSpec& spec) -> T& { return internal::Follow(spec, path...); });
}

FieldSpec String(std::string name, Access<std::string> at);
FieldSpec Boolean(std::string name, Access<bool> at);
FieldSpec Integer(std::string name, Access<int> at);
FieldSpec Integer(std::string name, Access<int64_t> at);
FieldSpec Integer(std::string name, Access<uint64_t> at);
FieldSpec Number(std::string name, Access<double> at);
FieldSpec Enum(std::string name, Access<std::string> at, std::vector<std::string> allowed);
// A C++ enum spelt with ToString(value); `values` in message order.
FieldSpec Enum(std::string name, Access<SyncMode> at, std::vector<SyncMode> values);
FieldSpec Enum(std::string name, Access<RestartPolicy> at, std::vector<RestartPolicy> values);
FieldSpec Enum(std::string name, Access<CleanPodPolicy> at, std::vector<CleanPodPolicy> values);
// A pod template, kept verbatim as JSON (null when absent).
FieldSpec PodTemplate(std::string name, Access<nlohmann::json> at);
FieldSpec Object(std::string name, std::vector<FieldSpec> fields);
// A field the manifest may not contain; `why` is the error message.
FieldSpec Rejected(std::string name, std::string why);

// Reads the fields of `object` (a mapping at `path`) into `spec`; reports
// every problem, unknown fields included, in table order.
void ReadFields(const std::vector<FieldSpec>& fields, const YAML::Node& object,
                const std::string& path, std::vector<FieldError>* errors, TrainingJobSpec* spec);
// The fields' values in `spec` as a JSON object (the canonical form).
nlohmann::json WriteFields(const std::vector<FieldSpec>& fields, const TrainingJobSpec& spec);

}  // namespace kubeps::api

#endif  // KUBEPS_API_FIELD_SPEC_H_
