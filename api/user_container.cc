// A built-in model or the job's own program (user_container.h): the check
// across spec.model, spec.dataset and the worker's pod template, and the
// user's container read from the template's JSON into a UserContainer.
#include "api/user_container.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "api/manifest_reader.h"
#include "api/models.h"

namespace kubeps::api {
namespace {

using nlohmann::json;

bool Present(const YAML::Node& node) { return node.IsDefined() && !node.IsNull(); }

// A JSON value as messages show it, as Describe does for YAML.
std::string DescribeJson(const json& value) {
  if (value.is_string()) return internal::Quote(value.get<std::string>());
  if (value.is_object()) return "a mapping";
  if (value.is_array()) return "a list";
  return value.dump();
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// Kubernetes' rule for variable names: printable ASCII without '='.
bool IsEnvName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c < 0x20 || c > 0x7e || c == '=') return false;
  }
  return true;
}

// Reads the fields of one container (a JSON object at `path`), reporting
// each problem under its own path.
class ContainerReader {
 public:
  ContainerReader(const json& container, std::string path, std::vector<FieldError>* errors)
      : container_(container), path_(std::move(path)), errors_(errors) {}

  bool ok() const { return errors_->size() == errors_at_start_; }

  void Error(const std::string& key, const std::string& message) {
    errors_->push_back({internal::JoinPath(path_, key), message});
  }

  // A string; false when absent or wrong (reported).
  bool String(const std::string& key, std::string* out) {
    const json* value = Find(key);
    if (!value) return false;
    if (!value->is_string()) {
      Error(key, "must be a string, got " + DescribeJson(*value) + QuoteHint(*value));
      return false;
    }
    *out = value->get<std::string>();
    return true;
  }

  // A list of strings; false when absent or wrong (reported).
  bool StringList(const std::string& key, std::vector<std::string>* out) {
    const json* value = Find(key);
    if (!value) return false;
    if (!value->is_array()) {
      Error(key, "must be a list of strings, got " + DescribeJson(*value));
      return false;
    }
    bool good = true;
    for (size_t i = 0; i < value->size(); ++i) {
      const json& item = (*value)[i];
      if (item.is_string()) {
        out->push_back(item.get<std::string>());
        continue;
      }
      errors_->push_back({Index(internal::JoinPath(path_, key), i),
                          "must be a string, got " + DescribeJson(item) + QuoteHint(item)});
      good = false;
    }
    return good;
  }

  void Env(std::vector<EnvVar>* out) {
    const json* value = Find("env");
    if (!value) return;
    if (!value->is_array()) {
      Error("env", "must be a list of {name, value} entries, got " + DescribeJson(*value));
      return;
    }
    for (size_t i = 0; i < value->size(); ++i) {
      const std::string at = Index(internal::JoinPath(path_, "env"), i);
      EnvVar var;
      if (ReadEnvVar((*value)[i], at, &var)) out->push_back(std::move(var));
    }
  }

  // volumeMounts and resources are the operator's; checked only for shape.
  void VolumeMounts() {
    const json* value = Find("volumeMounts");
    if (!value) return;
    if (!value->is_array()) {
      Error("volumeMounts",
            "must be a list of {name, mountPath} entries, got " + DescribeJson(*value));
      return;
    }
    for (size_t i = 0; i < value->size(); ++i) {
      const json& mount = (*value)[i];
      const std::string at = Index(internal::JoinPath(path_, "volumeMounts"), i);
      if (!mount.is_object()) {
        errors_->push_back(
            {at, "must be a mapping with name and mountPath, got " + DescribeJson(mount)});
        continue;
      }
      ContainerReader entry(mount, at, errors_);
      for (const char* key : {"name", "mountPath"}) {
        std::string text;
        if (!entry.String(key, &text) && !entry.Find(key)) entry.Error(key, "required");
      }
    }
  }

  void MustBeMapping(const std::string& key) {
    const json* value = Find(key);
    if (value && !value->is_object()) Error(key, "must be a mapping, got " + DescribeJson(*value));
  }

  // The value of `key`, or null when absent or null.
  const json* Find(const std::string& key) const {
    auto it = container_.find(key);
    if (it == container_.end() || it->is_null()) return nullptr;
    return &*it;
  }

 private:
  // Numbers and booleans are what YAML makes of an unquoted 1 or true;
  // Kubernetes wants strings there.
  static std::string QuoteHint(const json& value) {
    if (value.is_number() || value.is_boolean()) {
      return " (quote it: " + internal::Quote(value.dump()) + ")";
    }
    return "";
  }

  bool ReadEnvVar(const json& entry, const std::string& at, EnvVar* var) {
    if (!entry.is_object()) {
      errors_->push_back({at, "must be a mapping with name and value, got " + DescribeJson(entry)});
      return false;
    }
    ContainerReader reader(entry, at, errors_);
    if (!reader.String("name", &var->name)) {
      if (!reader.Find("name")) reader.Error("name", "required");
    } else if (!IsEnvName(var->name)) {
      reader.Error("name",
                   "must be printable ASCII without '=', got " + internal::Quote(var->name));
    }
    reader.String("value", &var->value);
    if (const json* from = reader.Find("valueFrom")) {
      if (!from->is_object()) {
        reader.Error("valueFrom",
                     "must be a mapping (secretKeyRef, fieldRef, ...), got " + DescribeJson(*from));
      } else if (!var->value.empty()) {
        reader.Error("valueFrom", "may not be given together with a value");
      } else {
        var->value_from = *from;
      }
    }
    std::vector<std::string> known = {"name", "value", "valueFrom"};
    for (const auto& [key, unused] : entry.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string message = "unknown field";
      if (auto suggestion = internal::Suggest(key, known)) {
        message += " (did you mean " + internal::Quote(*suggestion) + "?)";
      }
      reader.Error(key, message);
    }
    return reader.ok();
  }

  const json& container_;
  const std::string path_;
  std::vector<FieldError>* errors_;
  const size_t errors_at_start_ = errors_->size();
};

// The user's container, at `path`; nullopt after reporting its problems.
std::optional<UserContainer> ReadUserContainer(const json& container, int index,
                                               const std::string& path,
                                               std::vector<FieldError>* errors) {
  if (!container.is_object()) {
    errors->push_back({path, "must be a mapping (a container), got " + DescribeJson(container)});
    return std::nullopt;
  }
  UserContainer user;
  user.index = index;
  ContainerReader reader(container, path, errors);
  if (!reader.String("name", &user.name)) user.name = kWorkerContainerName;
  if (!reader.String("image", &user.image) && !reader.Find("image")) {
    reader.Error("image",
                 "required: the image that holds your training program (the operator "
                 "runs it; kubeps run runs the command on this machine instead)");
  }
  if (reader.StringList("command", &user.command)) {
    if (user.command.empty()) {
      reader.Error("command", "must name the program to run, got an empty list");
    } else if (user.command.front().empty()) {
      reader.Error("command[0]", "must name the program to run, got \"\"");
    }
  } else if (!reader.Find("command")) {
    reader.Error("command",
                 "required: the command of your training program, e.g. [python3, train.py] (a "
                 "job without spec.model runs this container's command beside the kubeps agent)");
  }
  reader.StringList("args", &user.args);
  reader.Env(&user.env);
  reader.String("workingDir", &user.working_dir);
  reader.VolumeMounts();
  reader.MustBeMapping("resources");
  if (!reader.ok()) return std::nullopt;
  return user;
}

// No main container of the worker template may take the sidecar's name, in
// any job (the CRD's rule on each container cannot tell a job's program).
// Where the job brings its own program (`own_program`), an init container
// of that name is the sidecar's own entry: it may set the agent's image and
// resources (a namespace whose ResourceQuota wants requests or limits
// refuses a pod whose containers lack them), and nothing else, since kubeps
// sets how the agent runs.
void CheckReservedNames(const json& pod_template, bool own_program,
                        std::vector<FieldError>* errors) {
  if (!pod_template.is_object() || !pod_template.contains("spec") ||
      !pod_template["spec"].is_object()) {
    return;
  }
  const json& pod_spec = pod_template["spec"];
  for (const char* list : {"containers", "initContainers"}) {
    auto it = pod_spec.find(list);
    if (it == pod_spec.end() || !it->is_array()) continue;
    const bool init = std::string(list) == "initContainers";
    if (init && !own_program) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& container = (*it)[i];
      if (!container.is_object() || container.value("name", json()) != kAgentContainerName) {
        continue;
      }
      const std::string at =
          Index(std::string("spec.replicaSpecs.worker.template.spec.") + list, i);
      if (!init) {
        errors->push_back({at + ".name", kAgentNameTaken});
        continue;
      }
      for (const auto& [field, value] : container.items()) {
        if (field == "name" || field == "image" || field == "resources") continue;
        errors->push_back({at + "." + field, std::string("the agent's own entry (") +
                                                 kAgentContainerName +
                                                 ") may set only image and resources; kubeps "
                                                 "sets how the agent runs"});
      }
      if (container.contains("resources") && !container["resources"].is_object()) {
        errors->push_back(
            {at + ".resources", "must be a mapping, got " + container["resources"].dump()});
      }
    }
  }
}

// Why a job without a model has no program of its own, at which field.
FieldError NoProgram(const json& pod_template) {
  FieldError neither{"spec.model", NoProgramMessage()};
  if (!pod_template.is_object()) return neither;
  auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || spec->is_null()) return neither;
  if (!spec->is_object()) {
    return {"spec.replicaSpecs.worker.template.spec",
            "must be a mapping (a pod spec), got " + DescribeJson(*spec)};
  }
  auto containers = spec->find("containers");
  if (containers == spec->end() || containers->is_null() ||
      (containers->is_array() && containers->empty())) {
    return neither;
  }
  if (!containers->is_array()) {
    return {kWorkerContainersPath,
            "must be a list of containers, got " + DescribeJson(*containers)};
  }
  return {kWorkerContainersPath, std::to_string(containers->size()) + kNoneNamedWorker};
}

}  // namespace

std::string NoProgramMessage() {
  std::string model_names;
  const size_t count = std::size(kModels);
  for (size_t i = 0; i < count; ++i) {
    model_names += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") + kModels[i].name;
  }
  return "required unless the job brings its own training program: name a built-in model (" +
         model_names +
         ") with spec.dataset.path, or give the worker's pod template a container that runs your "
         "program (" +
         kWorkerContainersPath + ": [{name, image, command}])";
}

int MainContainerIndex(const json& pod_template, const std::string& name) {
  if (!pod_template.is_object()) return -1;
  auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || !spec->is_object()) return -1;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array()) return -1;
  for (size_t i = 0; i < containers->size(); ++i) {
    const json& container = (*containers)[i];
    if (container.is_object() && container.value("name", json()) == name) {
      return static_cast<int>(i);
    }
  }
  return containers->size() == 1 ? 0 : -1;
}

std::string ExpandVariableReferences(const std::string& text,
                                     const std::map<std::string, std::string>& variables) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    if (text[i + 1] == '$') {  // the escape: one literal $
      out += '$';
      ++i;
      continue;
    }
    const size_t close = text[i + 1] == '(' ? text.find(')', i + 2) : std::string::npos;
    auto found = close == std::string::npos ? variables.end()
                                            : variables.find(text.substr(i + 2, close - i - 2));
    if (found == variables.end()) {
      out += text[i];
      continue;
    }
    out += found->second;
    i = close;
  }
  return out;
}

namespace internal {

void ReadTrainingProgram(const YAML::Node& spec_node, TrainingJobSpec* spec,
                         std::vector<FieldError>* errors) {
  if (!spec_node.IsMap()) return;  // reported already, by the spec's reader
  const bool has_model = Present(spec_node["model"]);
  const bool has_dataset = Present(spec_node["dataset"]);
  const json& pod_template = spec->worker.template_override;
  const int main_index = MainContainerIndex(pod_template, kWorkerContainerName);
  const std::string main_path = Index(kWorkerContainersPath, main_index < 0 ? 0 : main_index);

  CheckReservedNames(pod_template, !(has_model || has_dataset), errors);
  if (has_model || has_dataset) {
    // Before jobs could bring their own program, spec.model defaulted to
    // mlp: a manifest with only a data set still trains it.
    if (!has_model) spec->model = "mlp";
    if (!has_dataset) errors->push_back({"spec.dataset.path", "required"});
    if (spec->optimizer.name == "none") {
      errors->push_back({"spec.optimizer.name",
                         "none: the servers only average the gradients, for a training program "
                         "that runs its own optimizer, but the built-in model \"" +
                             spec->model +
                             "\" has none of its own: use sgd, momentum or adam, or bring your "
                             "own program"});
    }
    if (main_index >= 0 && pod_template["spec"]["containers"][main_index].is_object() &&
        pod_template["spec"]["containers"][main_index].contains("command") &&
        !pod_template["spec"]["containers"][main_index]["command"].is_null()) {
      errors->push_back(
          {main_path + ".command",
           std::string("a job either trains a built-in model (spec.") +
               (has_model ? "model" : "dataset") +
               ", whose trainer runs in this container) or runs its own program (this "
               "command), not both: leave out spec.model and spec.dataset, or this command"});
    }
    return;
  }
  if (main_index < 0) {
    errors->push_back(NoProgram(pod_template));
    return;
  }
  spec->user_container = ReadUserContainer(pod_template["spec"]["containers"][main_index],
                                           main_index, main_path, errors);
}

}  // namespace internal
}  // namespace kubeps::api
