// A TrainingJob that brings its own training program in the worker's pod
// template (api/user_container.h): the typed container `kubeps run` uses,
// the canonical form, the choice between a built-in model and a program of
// one's own, and every mistake, by field path and message.
#include "api/user_container.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/training_job.h"

namespace kubeps::api {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const char* kOwnProgram = R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: mlp-torch
spec:
  optimizer:
    name: adam
    learningRate: 0.001
  replicaSpecs:
    ps:
      replicas: 2
    worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: trainer
              image: registry.example/mlp:1
              command: [python3, train.py]
              args: ["--steps", "300"]
              workingDir: /app
              env:
                - {name: STEPS, value: "300"}
                - {name: LOG, value: "$(STEPS) steps, $$(STEPS) literally"}
                - name: API_KEY
                  valueFrom: {secretKeyRef: {name: keys, key: api}}
              resources:
                limits: {cpu: "2"}
              volumeMounts:
                - {name: data, mountPath: /data}
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

std::vector<std::string> Errors(const std::string& yaml) {
  std::vector<std::string> out;
  for (const FieldError& error : ParseTrainingJob(yaml).errors) out.push_back(error.ToString());
  return out;
}

const std::string kContainer = "spec.replicaSpecs.worker.template.spec.containers[0]";

TEST(UserContainerTest, TheWorkersContainerIsTheProgram) {
  ParseResult parsed = ParseTrainingJob(kOwnProgram);
  ASSERT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  const TrainingJobSpec& spec = parsed.job->spec;
  EXPECT_EQ(spec.model, "");
  EXPECT_EQ(spec.dataset_path, "");
  ASSERT_TRUE(spec.brings_own_program());
  const UserContainer& c = *spec.user_container;
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(c.name, "trainer");
  EXPECT_EQ(c.image, "registry.example/mlp:1");
  EXPECT_THAT(c.command, ElementsAre("python3", "train.py"));
  EXPECT_THAT(c.args, ElementsAre("--steps", "300"));
  EXPECT_EQ(c.working_dir, "/app");
  ASSERT_EQ(c.env.size(), 3u);
  EXPECT_EQ(c.env[0].name, "STEPS");
  EXPECT_EQ(c.env[0].value, "300");
  EXPECT_TRUE(c.env[0].value_from.is_null());
  EXPECT_EQ(c.env[1].value, "$(STEPS) steps, $$(STEPS) literally") << "expanded when run";
  EXPECT_EQ(c.env[2].name, "API_KEY");
  EXPECT_EQ(c.env[2].value_from["secretKeyRef"]["key"], "api");
  // The operator gets the template as written.
  EXPECT_EQ(spec.worker.template_override["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "2");
}

TEST(UserContainerTest, TheCanonicalFormReadsBackTheSame) {
  ParseResult first = ParseTrainingJob(kOwnProgram);
  ASSERT_TRUE(first.ok());
  const nlohmann::json canonical = ToJson(*first.job);
  EXPECT_FALSE(canonical["spec"].contains("model")) << canonical.dump();
  EXPECT_FALSE(canonical["spec"].contains("dataset")) << canonical.dump();
  ParseResult again = ParseTrainingJob(canonical.dump());
  ASSERT_TRUE(again.ok()) << again.ErrorReport("canonical");
  EXPECT_EQ(ToJson(*again.job), canonical);
  EXPECT_EQ(again.job->spec.user_container->command, first.job->spec.user_container->command);
}

TEST(UserContainerTest, OfSeveralContainersTheOneNamedWorkerIsTheProgram) {
  std::string yaml = Replace(kOwnProgram, "            - name: trainer\n",
                             "            - name: log-shipper\n              image: fluent-bit\n"
                             "            - name: worker\n");
  ParseResult parsed = ParseTrainingJob(yaml);
  ASSERT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  EXPECT_EQ(parsed.job->spec.user_container->index, 1);
  EXPECT_EQ(parsed.job->spec.user_container->name, "worker");

  EXPECT_THAT(Errors(Replace(kOwnProgram, "            - name: trainer\n",
                             "            - name: log-shipper\n              image: fluent-bit\n"
                             "            - name: trainer\n")),
              ElementsAre("spec.replicaSpecs.worker.template.spec.containers: 2 containers and "
                          "none is named \"worker\": name the container that runs your training "
                          "program \"worker\""));
}

TEST(UserContainerTest, ADataSetWithoutAModelStillTrainsTheMlp) {
  ParseResult parsed = ParseTrainingJob(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: old}
spec:
  dataset: {path: /data}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  EXPECT_EQ(parsed.job->spec.model, "mlp");
  EXPECT_FALSE(parsed.job->spec.brings_own_program());
  EXPECT_EQ(ToJson(*parsed.job)["spec"]["model"], "mlp");
}

TEST(UserContainerTest, NeitherAModelNorAProgram) {
  const std::string neither =
      "spec.model: required unless the job brings its own training program: name a built-in "
      "model (softmax, mlp or cnn) with spec.dataset.path, or give the worker's pod template a "
      "container that runs your program (spec.replicaSpecs.worker.template.spec.containers: "
      "[{name, image, command}])";
  EXPECT_THAT(Errors(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: empty}
spec:
  replicaSpecs: {worker: {replicas: 1}}
)"),
              ElementsAre(neither));
  EXPECT_THAT(Errors(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: empty}
spec:
  replicaSpecs: {worker: {template: {spec: {containers: []}}}}
)"),
              ElementsAre(neither));
}

TEST(UserContainerTest, BothAModelAndAProgram) {
  EXPECT_THAT(
      Errors(Replace(kOwnProgram, "spec:\n  optimizer:",
                     "spec:\n  model: mlp\n  dataset: {path: "
                     "/data}\n  optimizer:")),
      ElementsAre(kContainer +
                  ".command: a job either trains a built-in model (spec.model, whose trainer "
                  "runs in this container) or runs its own program (this command), not both: "
                  "leave out spec.model and spec.dataset, or this command"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "spec:\n  optimizer:",
                             "spec:\n  dataset: {path: /data}\n  optimizer:")),
              ElementsAre(HasSubstr("a built-in model (spec.dataset, whose trainer")));
}

TEST(UserContainerTest, AModelWithoutItsDataSet) {
  EXPECT_THAT(
      Errors(Replace(kOwnProgram, "spec:\n  optimizer:", "spec:\n  model: cnn\n  optimizer:")),
      ElementsAre("spec.dataset.path: required",
                  kContainer + ".command: a job either trains a built-in model "
                               "(spec.model, whose trainer runs in this container) or "
                               "runs its own program (this command), not both: leave "
                               "out spec.model and spec.dataset, or this command"));
}

TEST(UserContainerTest, AProgramNeedsACommandAndAnImage) {
  EXPECT_THAT(Errors(Replace(kOwnProgram, "              command: [python3, train.py]\n", "")),
              ElementsAre(kContainer +
                          ".command: required: the command of your training program, e.g. "
                          "[python3, train.py] (a job without spec.model runs this container's "
                          "command beside the kubeps agent)"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "command: [python3, train.py]", "command: []")),
              ElementsAre(kContainer + ".command: must name the program to run, got an empty "
                                       "list"));
  EXPECT_THAT(
      Errors(Replace(kOwnProgram, "command: [python3, train.py]", "command: python3 train.py")),
      ElementsAre(kContainer + ".command: must be a list of strings, got \"python3 "
                               "train.py\""));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "              image: registry.example/mlp:1\n", "")),
              ElementsAre(HasSubstr(kContainer + ".image: required: the image that holds your "
                                                 "training program")));
}

TEST(UserContainerTest, ArgsAndEnvValuesAreStrings) {
  EXPECT_THAT(Errors(Replace(kOwnProgram, "args: [\"--steps\", \"300\"]", "args: [--steps, 300]")),
              ElementsAre(kContainer + ".args[1]: must be a string, got 300 (quote it: \"300\")"));
  EXPECT_THAT(
      Errors(Replace(kOwnProgram, "{name: STEPS, value: \"300\"}", "{name: STEPS, value: 300}")),
      ElementsAre(kContainer + ".env[0].value: must be a string, got 300 (quote it: "
                               "\"300\")"));
}

TEST(UserContainerTest, EnvEntriesNeedANameAndOneValue) {
  EXPECT_THAT(Errors(Replace(kOwnProgram, "{name: STEPS, value: \"300\"}", "{value: \"300\"}")),
              ElementsAre(kContainer + ".env[0].name: required"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "{name: STEPS, value: \"300\"}",
                             "{name: \"A=B\", value: \"300\"}")),
              ElementsAre(kContainer + ".env[0].name: must be printable ASCII without '=', got "
                                       "\"A=B\""));
  EXPECT_THAT(
      Errors(Replace(kOwnProgram, "{name: STEPS, value: \"300\"}", "{name: STEPS, valu: \"300\"}")),
      ElementsAre(kContainer + ".env[0].valu: unknown field (did you mean \"value\"?)"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "                  valueFrom:",
                             "                  value: x\n                  valueFrom:")),
              ElementsAre(kContainer + ".env[2].valueFrom: may not be given together with a "
                                       "value"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "{name: STEPS, value: \"300\"}", "STEPS=300")),
              ElementsAre(kContainer + ".env[0]: must be a mapping with name and value, got "
                                       "\"STEPS=300\""));
}

TEST(UserContainerTest, VolumeMountsAndResourcesHaveTheirShape) {
  EXPECT_THAT(Errors(Replace(kOwnProgram, "{name: data, mountPath: /data}", "{name: data}")),
              ElementsAre(kContainer + ".volumeMounts[0].mountPath: required"));
  EXPECT_THAT(Errors(Replace(kOwnProgram, "resources:\n                limits: {cpu: \"2\"}",
                             "resources: 2")),
              ElementsAre(kContainer + ".resources: must be a mapping, got 2"));
}

TEST(UserContainerTest, TheAgentsNameIsReservedForItsOwnEntry) {
  EXPECT_THAT(Errors(Replace(kOwnProgram, "- name: trainer", "- name: kubeps-agent")),
              ElementsAre("spec.replicaSpecs.worker.template.spec.containers[0].name: "
                          "\"kubeps-agent\" is the name of the kubeps agent that runs beside "
                          "your program; name this container otherwise"));
  // Its own entry, among the init containers, sets its image and resources
  // (a quota that wants requests), and nothing else.
  EXPECT_THAT(Errors(Replace(kOwnProgram, "          containers:\n",
                             "          initContainers:\n            - {name: kubeps-agent, "
                             "image: x, resources: {requests: {cpu: 200m}}}\n"
                             "          containers:\n")),
              ElementsAre());
  EXPECT_THAT(Errors(Replace(kOwnProgram, "          containers:\n",
                             "          initContainers:\n            - {name: kubeps-agent, "
                             "command: [sh], resources: 2}\n          containers:\n")),
              ElementsAre("spec.replicaSpecs.worker.template.spec.initContainers[0].command: the "
                          "agent's own entry (kubeps-agent) may set only image and resources; "
                          "kubeps sets how the agent runs",
                          "spec.replicaSpecs.worker.template.spec.initContainers[0].resources: "
                          "must be a mapping, got 2"));
}

// A built-in model's container is kubeps' own: image, resources, env and
// args are its business, as before; only a command means a program.
TEST(UserContainerTest, ABuiltInModelsContainerIsKeptAsItWas) {
  ParseResult parsed = ParseTrainingJob(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: builtin}
spec:
  model: cnn
  dataset: {path: /data}
  replicaSpecs:
    worker:
      template:
        spec:
          containers:
            - name: worker
              args: ["--verbose", 42]
              env: [{name: EXTRA, value: "1"}]
)");
  ASSERT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  EXPECT_FALSE(parsed.job->spec.brings_own_program());
}

// The CRD's rule on each container cannot tell whether the job brings a
// program, so the name is refused beside a built-in model too, alike.
TEST(UserContainerTest, TheAgentsNameIsReservedBesideABuiltInModelToo) {
  EXPECT_THAT(Errors(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: builtin}
spec:
  model: cnn
  dataset: {path: /data}
  replicaSpecs:
    worker:
      template:
        spec:
          containers:
            - name: worker
            - name: kubeps-agent
)"),
              ElementsAre("spec.replicaSpecs.worker.template.spec.containers[1].name: "
                          "\"kubeps-agent\" is the name of the kubeps agent that runs beside "
                          "your program; name this container otherwise"));
}

TEST(UserContainerTest, ASpecThatIsNoMappingIsOneError) {
  EXPECT_THAT(Errors("apiVersion: kubeps.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
                     "spec: 3\n"),
              ElementsAre("spec: must be a mapping, got 3"));
}

TEST(UserContainerTest, MainContainerIndex) {
  using nlohmann::json;
  EXPECT_EQ(MainContainerIndex(nullptr, "worker"), -1);
  EXPECT_EQ(MainContainerIndex(json::object(), "worker"), -1);
  EXPECT_EQ(
      MainContainerIndex({{"spec", {{"containers", json::array({{{"name", "a"}}})}}}}, "worker"),
      0);
  json two = {{"spec", {{"containers", json::array({{{"name", "a"}}, {{"name", "worker"}}})}}}};
  EXPECT_EQ(MainContainerIndex(two, "worker"), 1);
  EXPECT_EQ(MainContainerIndex(two, "server"), -1);
}

TEST(UserContainerTest, VariableReferencesAreExpandedAsKubernetesDoes) {
  const std::map<std::string, std::string> vars = {{"A", "1"}, {"DIR", "/data"}};
  EXPECT_EQ(ExpandVariableReferences("$(DIR)/x", vars), "/data/x");
  EXPECT_EQ(ExpandVariableReferences("$(A)$(A)", vars), "11");
  EXPECT_EQ(ExpandVariableReferences("$(MISSING) stays", vars), "$(MISSING) stays");
  EXPECT_EQ(ExpandVariableReferences("$$(A) is escaped, $$ too", vars), "$(A) is escaped, $ too");
  EXPECT_EQ(ExpandVariableReferences("$A, $(A, trailing $", vars), "$A, $(A, trailing $");
}

}  // namespace
}  // namespace kubeps::api
