// The FieldSpec constructors, and the walkers that read a manifest and write
// the canonical JSON through a table of them.
#include "api/field_spec.h"

#include <limits>

#include "api/manifest_reader.h"

namespace kubeps::api {
namespace {

using internal::MapReader;

// The member behind `at`, read only: writers look and never change it.
template <typename T>
const T& Get(const Access<T>& at, const TrainingJobSpec& spec) {
  return at(const_cast<TrainingJobSpec&>(spec));
}

FieldSpec Leaf(std::string name, FieldType type) {
  FieldSpec field;
  field.name = std::move(name);
  field.type = type;
  return field;
}

template <typename T>
FieldSpec::Writer WriteAsJson(Access<T> at) {
  return [at](const TrainingJobSpec& spec) { return nlohmann::json(Get(at, spec)); };
}

int64_t IntegerMinimum(const FieldSpec& field, int64_t lowest) {
  return field.minimum ? static_cast<int64_t>(*field.minimum) : lowest;
}

// C++ enums travel as their ToString names.
template <typename E>
FieldSpec EnumOf(std::string name, Access<E> at, std::vector<E> values) {
  FieldSpec field = Leaf(std::move(name), FieldType::kString);
  for (E value : values) field.allowed.push_back(ToString(value));
  field.read = [at, values](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                            TrainingJobSpec* spec) {
    std::string text;
    if (!parent.ReadEnum(f.name, f.allowed, &text)) return;
    for (size_t i = 0; i < values.size(); ++i) {
      if (f.allowed[i] == text) at(*spec) = values[i];
    }
  };
  field.write = [at](const TrainingJobSpec& spec) {
    return nlohmann::json(ToString(Get(at, spec)));
  };
  return field;
}

}  // namespace

FieldSpec String(std::string name, Access<std::string> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kString);
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) { parent.ReadString(f.name, &at(*spec), f.required); };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Boolean(std::string name, Access<bool> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kBoolean);
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) { parent.ReadBool(f.name, &at(*spec)); };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Integer(std::string name, Access<int> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kInteger);
  field.width = IntegerWidth::kInt32;
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) {
    parent.ReadInt(f.name, &at(*spec), IntegerMinimum(f, std::numeric_limits<int>::min()));
  };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Integer(std::string name, Access<int64_t> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kInteger);
  field.width = IntegerWidth::kInt64;
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) {
    parent.ReadInt64(f.name, &at(*spec), IntegerMinimum(f, std::numeric_limits<int64_t>::min()));
  };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Integer(std::string name, Access<uint64_t> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kInteger);
  field.width = IntegerWidth::kUint64;
  field.minimum = 0;  // what the type allows; the reader checks it
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) { parent.ReadUint64(f.name, &at(*spec)); };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Number(std::string name, Access<double> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kNumber);
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) {
    parent.ReadDouble(f.name, &at(*spec),
                      f.minimum.value_or(-std::numeric_limits<double>::infinity()),
                      f.exclusive_minimum, f.exclusive_maximum);
  };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Enum(std::string name, Access<std::string> at, std::vector<std::string> allowed) {
  FieldSpec field = Leaf(std::move(name), FieldType::kString);
  field.allowed = std::move(allowed);
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                    TrainingJobSpec* spec) { parent.ReadEnum(f.name, f.allowed, &at(*spec)); };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Enum(std::string name, Access<SyncMode> at, std::vector<SyncMode> values) {
  return EnumOf(std::move(name), std::move(at), std::move(values));
}

FieldSpec Enum(std::string name, Access<RestartPolicy> at, std::vector<RestartPolicy> values) {
  return EnumOf(std::move(name), std::move(at), std::move(values));
}

FieldSpec Enum(std::string name, Access<CleanPodPolicy> at, std::vector<CleanPodPolicy> values) {
  return EnumOf(std::move(name), std::move(at), std::move(values));
}

FieldSpec PodTemplate(std::string name, Access<nlohmann::json> at) {
  FieldSpec field = Leaf(std::move(name), FieldType::kPodTemplate);
  field.unset_by_default = true;  // absent: the operator's own pod
  field.read = [at](MapReader& parent, const FieldSpec& f, std::vector<FieldError>* errors,
                    TrainingJobSpec* spec) {
    YAML::Node node = parent.Get(f.name);
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap()) {
      parent.AddError(f.name,
                      "must be a mapping (a pod template), got " + internal::Describe(node));
      return;
    }
    at(*spec) = internal::YamlToJson(node, parent.FieldPath(f.name), errors);
  };
  field.write = WriteAsJson(at);
  return field;
}

FieldSpec Object(std::string name, std::vector<FieldSpec> fields) {
  FieldSpec field = Leaf(std::move(name), FieldType::kObject);
  field.fields = std::move(fields);
  return field;  // no read or write: ReadFields and WriteFields walk into it
}

FieldSpec Rejected(std::string name, std::string why) {
  FieldSpec field = Leaf(std::move(name), FieldType::kObject);
  field.rejected_because = std::move(why);
  field.read = [](MapReader& parent, const FieldSpec& f, std::vector<FieldError>*,
                  TrainingJobSpec*) {
    if (parent.Get(f.name).IsDefined()) parent.AddError(f.name, f.rejected_because);
  };
  return field;
}

void ReadFields(const std::vector<FieldSpec>& fields, const YAML::Node& object,
                const std::string& path, std::vector<FieldError>* errors, TrainingJobSpec* spec) {
  MapReader reader(object, path, errors);
  for (const FieldSpec& field : fields) {
    if (field.read) {
      field.read(reader, field, errors, spec);
      continue;
    }
    // An object left out is not looked into: the fields it requires are
    // required only when it is written (as in the CRD's schema).
    YAML::Node child = reader.Get(field.name);
    if (child.IsDefined() && !child.IsNull()) {
      ReadFields(field.fields, child, reader.FieldPath(field.name), errors, spec);
    }
  }
  reader.Finish();
}

nlohmann::json WriteFields(const std::vector<FieldSpec>& fields, const TrainingJobSpec& spec) {
  static const TrainingJobSpec defaults;
  nlohmann::json out = nlohmann::json::object();
  for (const FieldSpec& field : fields) {
    if (!field.rejected_because.empty()) continue;
    if (field.type == FieldType::kObject) {
      if (field.written_when && !field.written_when(spec)) continue;
      // Left out when every field in it is unset (spec.dataset of a job
      // that brings its own program).
      nlohmann::json object = WriteFields(field.fields, spec);
      if (!object.empty()) out[field.name] = std::move(object);
      continue;
    }
    nlohmann::json value = field.write(spec);
    if (field.unset_by_default && value == field.write(defaults)) continue;
    out[field.name] = std::move(value);
  }
  return out;
}

}  // namespace kubeps::api
