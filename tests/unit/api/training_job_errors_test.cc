// Bad TrainingJob manifests: one test per kind of mistake, each checking the
// field path and the message a user sees.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/training_job.h"

namespace kubeps::api {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A valid manifest; tests replace one line (or add some) to break it.
const char* kValid = R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: fashion-mnist
spec:
  mode: sync
  model: mlp
  dataset:
    path: /usr/share/datasets/fashion-mnist
  optimizer:
    name: sgd
    learningRate: 0.1
  epochs: 3
  runPolicy:
    restartPolicy: OnFailure
    backoffLimit: 3
  replicaSpecs:
    ps:
      replicas: 2
    worker:
      replicas: 2
)";

// kValid with the first occurrence of `from` replaced by `to`.
std::string With(const std::string& from, const std::string& to) {
  std::string text = kValid;
  size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

std::vector<std::string> Strings(const ParseResult& result) {
  std::vector<std::string> out;
  for (const auto& e : result.errors) out.push_back(e.ToString());
  return out;
}

// The manifest fails with exactly one error, at `field`, saying `message`.
void ExpectError(const std::string& yaml, const std::string& field, const std::string& message) {
  ParseResult result = ParseTrainingJob(yaml);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result.job.has_value());
  ASSERT_EQ(result.errors.size(), 1u) << ::testing::PrintToString(Strings(result));
  EXPECT_EQ(result.errors[0].field, field);
  EXPECT_EQ(result.errors[0].message, message);
}

TEST(ApiTrainingJobErrorsTest, ValidBaseManifestParses) {
  ParseResult result = ParseTrainingJob(kValid);
  ASSERT_TRUE(result.ok()) << result.ErrorReport("kValid");
  ASSERT_TRUE(result.job.has_value());
}

TEST(ApiTrainingJobErrorsTest, UnknownFieldSuggestsTheKnownName) {
  ExpectError(With("  optimizer:", "  optimiser:"), "spec.optimiser",
              "unknown field (did you mean \"optimizer\"?)");
  // Case and separators are folded: snake_case finds the camelCase name.
  ExpectError(With("learningRate:", "learning_rate:"), "spec.optimizer.learning_rate",
              "unknown field (did you mean \"learningRate\"?)");
  ExpectError(With("  epochs: 3\n", "  epochs: 3\n  colour: red\n"), "spec.colour",
              "unknown field");
  ExpectError(With("kind: TrainingJob\n", "kind: TrainingJob\nmetdata: {}\n"), "metdata",
              "unknown field (did you mean \"metadata\"?)");
}

TEST(ApiTrainingJobErrorsTest, NegativeReplicaCount) {
  ExpectError(With("    ps:\n      replicas: 2", "    ps:\n      replicas: -1"),
              "spec.replicaSpecs.ps.replicas", "must be >= 1, got -1");
}

TEST(ApiTrainingJobErrorsTest, ZeroWorkers) {
  ExpectError(With("    worker:\n      replicas: 2", "    worker:\n      replicas: 0"),
              "spec.replicaSpecs.worker.replicas", "must be >= 1, got 0");
}

// Any scheduler but volcano and scheduler-plugins-scheduler must say which
// PodGroup API it reads: before, every other name got scheduler-plugins'.
TEST(ApiTrainingJobErrorsTest, AnUnknownSchedulerMustNameItsPodGroupApi) {
  ExpectError(With("  epochs: 3", "  epochs: 3\n  schedulingPolicy: {schedulerName: my-gang}"),
              "spec.schedulingPolicy.podGroup",
              "required for schedulerName \"my-gang\": say which PodGroup API it reads "
              "(Volcano, SchedulerPlugins, or None for no PodGroup)");
  ExpectError(With("  epochs: 3",
                   "  epochs: 3\n  schedulingPolicy: {schedulerName: my-gang, "
                   "podGroup: Kueue}"),
              "spec.schedulingPolicy.podGroup",
              "must be one of \"Volcano\", \"SchedulerPlugins\" or \"None\", got \"Kueue\"");
  for (const char* api : {"Volcano", "SchedulerPlugins", "None"}) {
    ParseResult result = ParseTrainingJob(
        With("  epochs: 3", "  epochs: 3\n  schedulingPolicy: {schedulerName: my-gang, podGroup: " +
                                std::string(api) + "}"));
    EXPECT_TRUE(result.ok()) << api << ": " << result.ErrorReport("job.yaml");
  }
}

TEST(ApiTrainingJobErrorsTest, UnknownOptimizer) {
  ExpectError(With("name: sgd", "name: adagrad"), "spec.optimizer.name",
              "must be one of \"sgd\", \"momentum\", \"adam\" or \"none\", got \"adagrad\"");
  ExpectError(With("name: sgd", "name: Adam"), "spec.optimizer.name",
              "must be one of \"sgd\", \"momentum\", \"adam\" or \"none\", got \"Adam\" "
              "(did you mean \"adam\"?)");
}

// kValid with a learning rate schedule of these lines under the optimizer.
std::string Scheduled(const std::string& lines) {
  return With("    learningRate: 0.1\n", "    learningRate: 0.1\n    schedule:\n" + lines);
}

TEST(ApiTrainingJobErrorsTest, AScheduleIsReadWithTheOptimizer) {
  ParseResult result = ParseTrainingJob(
      Scheduled("      warmupSteps: 100\n      decay: cosine\n      decaySteps: 900\n"
                "      minLearningRate: 0.001\n"));
  ASSERT_TRUE(result.ok()) << ::testing::PrintToString(Strings(result));
  const LearningRateScheduleSpec& schedule = result.job->spec.optimizer.schedule;
  EXPECT_EQ(schedule.warmup_steps, 100);
  EXPECT_EQ(schedule.decay, "cosine");
  EXPECT_EQ(schedule.decay_steps, 900);
  EXPECT_DOUBLE_EQ(schedule.min_learning_rate, 0.001);
}

TEST(ApiTrainingJobErrorsTest, AScheduleSaysHowItDecaysAndToWhat) {
  ExpectError(Scheduled("      decay: cosine\n"), "spec.optimizer.schedule.decaySteps",
              "required with decay \"cosine\"");
  ExpectError(Scheduled("      decay: linear\n      decaySteps: 10\n      minLearningRate: 0.1\n"),
              "spec.optimizer.schedule.minLearningRate",
              "0.1 is not below spec.optimizer.learningRate (0.1): nothing to decay");
  ExpectError(Scheduled("      decay: cosin\n      decaySteps: 10\n"),
              "spec.optimizer.schedule.decay",
              "must be one of \"none\", \"cosine\" or \"linear\", got \"cosin\" (did you mean "
              "\"cosine\"?)");
  ExpectError(Scheduled("      decaySteps: 10\n"), "spec.optimizer.schedule.decay",
              "none, but decaySteps or minLearningRate is given: say how to decay (cosine or "
              "linear)");
}

TEST(ApiTrainingJobErrorsTest, OptimizerNoneHasNoRateToSchedule) {
  std::string text = Scheduled("      warmupSteps: 10\n");
  text.replace(text.find("name: sgd"), 9, "name: none");
  ParseResult result = ParseTrainingJob(text);
  EXPECT_THAT(Strings(result),
              ::testing::Contains(HasSubstr(
                  "spec.optimizer.schedule: optimizer none has no learning rate to schedule")));
}

// none leaves the update to the program's own optimizer: a built-in model
// would take the averaged gradients for its parameters and train nothing.
TEST(ApiTrainingJobErrorsTest, ABuiltInModelNeedsTheServersToUpdate) {
  ExpectError(With("name: sgd", "name: none"), "spec.optimizer.name",
              "none: the servers only average the gradients, for a training program that "
              "runs its own optimizer, but the built-in model \"mlp\" has none of its own: "
              "use sgd, momentum or adam, or bring your own program");
}

TEST(ApiTrainingJobErrorsTest, UnknownModel) {
  ExpectError(With("model: mlp", "model: resnet50"), "spec.model",
              "must be one of \"softmax\", \"mlp\" or \"cnn\", got \"resnet50\"");
}

TEST(ApiTrainingJobErrorsTest, UnknownMode) {
  ExpectError(With("mode: sync", "mode: bounded-staleness"), "spec.mode",
              "must be one of \"sync\" or \"async\", got \"bounded-staleness\"");
  ExpectError(With("mode: sync", "mode: asnyc"), "spec.mode",
              "must be one of \"sync\" or \"async\", got \"asnyc\" (did you mean \"async\"?)");
}

TEST(ApiTrainingJobErrorsTest, MissingDatasetPath) {
  ExpectError(With("    path: /usr/share/datasets/fashion-mnist\n", "    path: \"\"\n"),
              "spec.dataset.path", "required");
  ExpectError(With("  dataset:\n    path: /usr/share/datasets/fashion-mnist\n", ""),
              "spec.dataset.path", "required");
  ExpectError(With("    path: /usr/share/datasets/fashion-mnist\n", "    path:\n"),
              "spec.dataset.path", "required");
}

TEST(ApiTrainingJobErrorsTest, DatasetGivenAsAStringIsOneError) {
  // The path written directly under dataset: one error, not a second
  // "required" for the path inside it.
  ExpectError(With("  dataset:\n    path: /usr/share/datasets/fashion-mnist\n",
                   "  dataset: /usr/share/datasets/fashion-mnist\n"),
              "spec.dataset", "must be a mapping, got \"/usr/share/datasets/fashion-mnist\"");
}

TEST(ApiTrainingJobErrorsTest, BadLearningRate) {
  const std::string field = "spec.optimizer.learningRate";
  ExpectError(With("learningRate: 0.1", "learningRate: 0"), field, "must be > 0, got 0");
  ExpectError(With("learningRate: 0.1", "learningRate: -0.05"), field, "must be > 0, got -0.05");
  ExpectError(With("learningRate: 0.1", "learningRate: .inf"), field,
              "must be a finite number, got .inf");
  ExpectError(With("learningRate: 0.1", "learningRate: .nan"), field,
              "must be a finite number, got .nan");
  ExpectError(With("learningRate: 0.1", "learningRate: fast"), field,
              "must be a number, got \"fast\"");
  ExpectError(With("learningRate: 0.1", "learningRate: \"0.1\""), field,
              "must be a number, got \"0.1\"");
  ExpectError(With("learningRate: 0.1", "learningRate: [0.1]"), field,
              "must be a number, got a list");
}

TEST(ApiTrainingJobErrorsTest, OptimizerRanges) {
  ExpectError(With("learningRate: 0.1", "learningRate: 0.1\n    momentum: 1"),
              "spec.optimizer.momentum", "must be in [0, 1), got 1");
  ExpectError(With("learningRate: 0.1", "learningRate: 0.1\n    beta2: -0.5"),
              "spec.optimizer.beta2", "must be in [0, 1), got -0.5");
  ExpectError(With("learningRate: 0.1", "learningRate: 0.1\n    epsilon: 0"),
              "spec.optimizer.epsilon", "must be > 0, got 0");
  ExpectError(With("learningRate: 0.1", "learningRate: 0.1\n    weightDecay: -1e-4"),
              "spec.optimizer.weightDecay", "must be >= 0, got -1e-4");
}

TEST(ApiTrainingJobErrorsTest, NonInteger) {
  ExpectError(With("epochs: 3", "epochs: \"three\""), "spec.epochs",
              "must be an integer, got \"three\"");
  ExpectError(With("epochs: 3", "epochs: three"), "spec.epochs",
              "must be an integer, got \"three\"");
  ExpectError(With("epochs: 3", "epochs: 1.5"), "spec.epochs", "must be an integer, got 1.5");
  ExpectError(With("epochs: 3", "epochs: \"3\""), "spec.epochs", "must be an integer, got \"3\"");
  ExpectError(With("epochs: 3", "epochs: {n: 3}"), "spec.epochs",
              "must be an integer, got a mapping");
}

TEST(ApiTrainingJobErrorsTest, IntegerOutOfRange) {
  ExpectError(With("epochs: 3", "epochs: 99999999999"), "spec.epochs",
              "must be at most 2147483647, got 99999999999");
  ExpectError(With("epochs: 3", "epochs: -99999999999999999999"), "spec.epochs",
              "must be >= 1, got -99999999999999999999");
  ExpectError(With("epochs: 3", "epochs: 3\n  bigArrayBound: 99999999999999999999"),
              "spec.bigArrayBound",
              "must be at most 9223372036854775807, got 99999999999999999999");
  ExpectError(With("epochs: 3", "epochs: 3\n  seed: -1"), "spec.seed", "must be >= 0, got -1");
  ExpectError(With("epochs: 3", "epochs: 3\n  seed: 18446744073709551616"), "spec.seed",
              "must be at most 18446744073709551615, got 18446744073709551616");
  ExpectError(With("epochs: 3", "epochs: 3\n  progressIntervalMs: 50"), "spec.progressIntervalMs",
              "must be >= 100, got 50");
}

TEST(ApiTrainingJobErrorsTest, PodStartTimeoutMustBePositive) {
  ExpectError(With("    backoffLimit: 3", "    backoffLimit: 3\n    podStartTimeoutSeconds: 0"),
              "spec.runPolicy.podStartTimeoutSeconds", "must be >= 1, got 0");
  ParseResult result = ParseTrainingJob(
      With("    backoffLimit: 3", "    backoffLimit: 3\n    podStartTimeoutSeconds: 300"));
  ASSERT_TRUE(result.ok()) << result.ErrorReport("job");
  EXPECT_EQ(result.job->spec.run_policy.pod_start_timeout_seconds, 300);
  EXPECT_EQ(ParseTrainingJob(kValid).job->spec.run_policy.pod_start_timeout_seconds, 0)
      << "unset: wait for a pod forever";
}

TEST(ApiTrainingJobErrorsTest, WrongApiVersion) {
  ExpectError(With("apiVersion: kubeps.io/v1alpha1", "apiVersion: kubeflow.org/v1"), "apiVersion",
              "must be \"kubeps.io/v1alpha1\", got \"kubeflow.org/v1\"");
  ExpectError(With("apiVersion: kubeps.io/v1alpha1\n", ""), "apiVersion",
              "required (expected \"kubeps.io/v1alpha1\")");
}

TEST(ApiTrainingJobErrorsTest, WrongKind) {
  ExpectError(With("kind: TrainingJob", "kind: TFJob"), "kind",
              "must be \"TrainingJob\", got \"TFJob\"");
  ExpectError(With("kind: TrainingJob\n", ""), "kind", "required (expected \"TrainingJob\")");
}

TEST(ApiTrainingJobErrorsTest, BadName) {
  const std::string dns1035 =
      "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter "
      "and ending with a letter or digit), got ";
  ExpectError(With("name: fashion-mnist", "name: Fashion_MNIST"), "metadata.name",
              dns1035 + "\"Fashion_MNIST\"");
  ExpectError(With("name: fashion-mnist", "name: 1st-job"), "metadata.name",
              dns1035 + "\"1st-job\"");
  ExpectError(With("name: fashion-mnist", "name: job-"), "metadata.name", dns1035 + "\"job-\"");
  ExpectError(With("name: fashion-mnist", "name: " + std::string(64, 'a')), "metadata.name",
              "must be at most 63 characters, got 64");
  ExpectError(With("  name: fashion-mnist\n", "  labels: {app: x}\n"), "metadata.name", "required");
  ExpectError(With("name: fashion-mnist", "name: fashion-mnist\n  namespace: Team_A"),
              "metadata.namespace",
              "must be a DNS-1123 label (lowercase letters, digits and '-', starting with a "
              "letter or digit and ending with a letter or digit), got \"Team_A\"");
}

TEST(ApiTrainingJobErrorsTest, SchedulerInReplicaSpecs) {
  ExpectError(With("  replicaSpecs:\n", "  replicaSpecs:\n    scheduler:\n      replicas: 1\n"),
              "spec.replicaSpecs.scheduler.replicas",
              "the scheduler is always exactly one replica: give only its template");
}

TEST(ApiTrainingJobErrorsTest, BadTemplate) {
  ExpectError(With("    worker:\n      replicas: 2",
                   "    worker:\n      replicas: 2\n      template: [a, b]"),
              "spec.replicaSpecs.worker.template",
              "must be a mapping (a pod template), got a list");
}

TEST(ApiTrainingJobErrorsTest, YamlSyntaxErrorNamesLineAndColumn) {
  // Line 6 has a second ':' inside a plain value.
  ExpectError(With("  mode: sync", "  mode: sync: async"), "",
              "invalid YAML at line 6, column 13: illegal map value");
  ParseResult unclosed = ParseTrainingJob("apiVersion: kubeps.io/v1alpha1\nkind: [TrainingJob\n");
  ASSERT_EQ(unclosed.errors.size(), 1u);
  EXPECT_THAT(unclosed.errors[0].message, HasSubstr("invalid YAML at line 3"));
}

// Found by the manifest's fuzz target: a manifest with a byte that is not
// UTF-8 was accepted, and handing the job on (its canonical JSON) then threw,
// so `kubeps run` ended in an uncaught exception. A manifest is UTF-8 text
// (YAML and the Kubernetes API say so): the byte is named where it is.
TEST(ApiTrainingJobErrorsTest, AByteThatIsNotUtf8IsAnErrorNamingItsLineAndColumn) {
  ExpectError(With("  mode: sync", "  mode: sync\n  # caf\xe9 au lait"), "",
              "line 7, column 8: byte 0xE9 is not UTF-8 (a manifest is UTF-8 text)");
  ExpectError(With("name: fashion-mnist", "name: fashion-mnist-\xb4"), "",
              "line 4, column 23: byte 0xB4 is not UTF-8 (a manifest is UTF-8 text)");
  // Overlong and surrogate encodings are not UTF-8 either; real characters
  // are, and count as one column each.
  ExpectError(With("name: fashion-mnist", "name: fashion-mnist # \xc0\xaf"), "",
              "line 4, column 25: byte 0xC0 is not UTF-8 (a manifest is UTF-8 text)");
  ExpectError(With("name: fashion-mnist", "name: fashion-mnist # é\xed\xa0\x80"), "",
              "line 4, column 26: byte 0xED is not UTF-8 (a manifest is UTF-8 text)");
  EXPECT_TRUE(ParseTrainingJob(With("  mode: sync", "  mode: sync  # café, 学習, 🚀")).ok());
}

// Found by the manifest's fuzz target: a ',' outside brackets at the top
// level made yaml-cpp's LoadAll read empty documents without end, taking
// 13 GB in a minute; the operator parses every TrainingJob a user writes.
TEST(ApiTrainingJobErrorsTest, AStrayCommaAtTheTopLevelIsAnErrorNotAnEndlessParse) {
  const std::string message =
      "invalid YAML: the text does not end after 64 documents (a ',' outside [ ] or { } at the "
      "top level reads as endless empty ones)";
  ExpectError(", a\n", "", message);
  ExpectError(std::string("# a comment\n, for each worker\n") + kValid, "", message);
  // Inside a mapping the same comma is an ordinary syntax error.
  ExpectError(With("kind: TrainingJob", "kind: TrainingJob\n, for each worker"), "",
              "invalid YAML at line 3, column 1: end of map not found");
  ExpectError("[a], b\n", "", message);
}

TEST(ApiTrainingJobErrorsTest, EmptyDocument) {
  const std::string message = "the manifest is empty (expected one TrainingJob document)";
  ExpectError("", "", message);
  ExpectError("# nothing but a comment\n", "", message);
  ExpectError("---\n", "", message);
}

TEST(ApiTrainingJobErrorsTest, DocumentNotAMapping) {
  ExpectError("- apiVersion: kubeps.io/v1alpha1\n", "",
              "the manifest must be a mapping with apiVersion, kind, metadata and spec, "
              "got a list");
  ExpectError("TrainingJob\n", "",
              "the manifest must be a mapping with apiVersion, kind, metadata and spec, "
              "got \"TrainingJob\"");
}

TEST(ApiTrainingJobErrorsTest, MoreThanOneDocument) {
  ExpectError(std::string(kValid) + "---\n" + kValid, "",
              "expected exactly one YAML document (a TrainingJob), found 2");
  // Empty documents around the job are fine.
  EXPECT_TRUE(ParseTrainingJob(std::string("---\n") + kValid + "---\n").ok());
}

TEST(ApiTrainingJobErrorsTest, MissingSpec) {
  std::string text = kValid;
  text = text.substr(0, text.find("spec:"));
  ExpectError(text, "spec", "required");
}

TEST(ApiTrainingJobErrorsTest, DuplicateField) {
  ExpectError(With("epochs: 3", "epochs: 3\n  epochs: 4"), "spec.epochs", "duplicate field");
}

TEST(ApiTrainingJobErrorsTest, UnknownRestartPolicy) {
  ExpectError(With("restartPolicy: OnFailure", "restartPolicy: Always"),
              "spec.runPolicy.restartPolicy",
              "must be one of \"OnFailure\", \"Never\" or \"ExitCode\", got \"Always\"");
  ExpectError(With("restartPolicy: OnFailure", "restartPolicy: onfailure"),
              "spec.runPolicy.restartPolicy",
              "must be one of \"OnFailure\", \"Never\" or \"ExitCode\", got \"onfailure\" "
              "(did you mean \"OnFailure\"?)");
}

TEST(ApiTrainingJobErrorsTest, NegativeBackoffLimit) {
  ExpectError(With("backoffLimit: 3", "backoffLimit: -2"), "spec.runPolicy.backoffLimit",
              "must be >= 0, got -2");
}

TEST(ApiTrainingJobErrorsTest, MultipleErrorsAreAllReported) {
  const char* bad = R"(apiVersion: kubeps.io/v1
kind: TrainingJob
metadata:
  name: Fashion
spec:
  mode: sync
  model: vgg
  dataset: {}
  optimizer:
    name: sgd
    learningRate: -1
  batchSize: 0
  epochs: three
  optimiser: {}
  runPolicy:
    restartPolicy: Always
    backoffLimit: -1
  replicaSpecs:
    scheduler: {replicas: 1}
    ps: {replicas: 0}
    worker: {replicas: -3}
)";
  ParseResult result = ParseTrainingJob(bad);
  ASSERT_FALSE(result.ok());
  std::vector<std::string> fields;
  for (const auto& e : result.errors) fields.push_back(e.field);
  EXPECT_THAT(fields,
              ElementsAre("apiVersion", "metadata.name", "spec.model", "spec.dataset.path",
                          "spec.optimizer.learningRate", "spec.batchSize", "spec.epochs",
                          "spec.runPolicy.restartPolicy", "spec.runPolicy.backoffLimit",
                          "spec.replicaSpecs.ps.replicas", "spec.replicaSpecs.worker.replicas",
                          "spec.replicaSpecs.scheduler.replicas", "spec.optimiser"));
  std::string report = result.ErrorReport("job.yaml");
  EXPECT_THAT(report, HasSubstr("job.yaml: spec.epochs: must be an integer, got \"three\"\n"));
  EXPECT_THAT(report,
              HasSubstr("job.yaml: spec.replicaSpecs.worker.replicas: must be >= 1, got -3\n"));
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'),
            static_cast<std::ptrdiff_t>(result.errors.size()));
}

TEST(ApiTrainingJobErrorsTest, ErrorReportFormat) {
  ParseResult result;
  result.errors = {{"spec.epochs", "must be >= 1, got 0"}, {"", "the manifest is empty"}};
  EXPECT_EQ(result.ErrorReport("a.yaml"),
            "a.yaml: spec.epochs: must be >= 1, got 0\n"
            "a.yaml: the manifest is empty\n");
}

TEST(ApiTrainingJobErrorsTest, MissingFile) {
  const std::string path = "/nonexistent/kubeps/job.yaml";
  ParseResult result = ParseTrainingJobFile(path);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].field, "");
  EXPECT_EQ(result.errors[0].message,
            "cannot read \"/nonexistent/kubeps/job.yaml\": No such file or directory");
  ParseResult dir = ParseTrainingJobFile(KUBEPS_SOURCE_DIR);
  ASSERT_EQ(dir.errors.size(), 1u);
  EXPECT_THAT(dir.errors[0].message, HasSubstr("is a directory"));
}

// kValid with an elasticPolicy of these lines under the worker role.
std::string Elastic(const std::string& policy) {
  return With("    worker:\n      replicas: 2\n",
              "    worker:\n      replicas: 2\n      elasticPolicy:\n" + policy);
}

TEST(ApiTrainingJobErrorsTest, AnElasticPolicyParsesWithItsDefaults) {
  ParseResult result =
      ParseTrainingJob(Elastic("        minReplicas: 1\n        maxReplicas: 4\n"));
  ASSERT_TRUE(result.ok()) << result.ErrorReport("elastic");
  const ElasticPolicy& policy = result.job->spec.elastic;
  EXPECT_TRUE(policy.enabled());
  EXPECT_EQ(policy.min_replicas, 1);
  EXPECT_EQ(policy.max_replicas, 4);
  EXPECT_EQ(policy.replace_timeout_seconds, 60);
  EXPECT_EQ(policy.batch, "global");
  EXPECT_FALSE(ParseTrainingJob(kValid).job->spec.elastic.enabled()) << "absent: fixed workers";
}

TEST(ApiTrainingJobErrorsTest, AnElasticPolicyMustHoldTheReplicasAndSayBothBounds) {
  const std::string field = "spec.replicaSpecs.worker.elasticPolicy";
  ExpectError(Elastic("        minReplicas: 3\n        maxReplicas: 4\n"),
              "spec.replicaSpecs.worker.replicas", "2 is outside elasticPolicy's [3, 4]");
  ExpectError(Elastic("        minReplicas: 1\n        maxReplicas: 1\n"),
              "spec.replicaSpecs.worker.replicas", "2 is outside elasticPolicy's [1, 1]");
  ExpectError(Elastic("        minReplicas: 4\n        maxReplicas: 2\n"), field,
              "minReplicas (4) is above maxReplicas (2)");
  ExpectError(Elastic("        minReplicas: 1\n"), field + ".maxReplicas",
              "required with minReplicas");
  ExpectError(Elastic("        maxReplicas: 3\n"), field + ".minReplicas",
              "required with maxReplicas");
  ExpectError(Elastic("        minReplicas: 0\n        maxReplicas: 3\n"), field + ".minReplicas",
              "must be >= 1, got 0");
  ExpectError(Elastic("        minReplicas: 1\n        maxReplicas: 3\n"
                      "        replaceTimeoutSeconds: 0\n"),
              field + ".replaceTimeoutSeconds", "must be >= 1, got 0");
  ExpectError(Elastic("        minReplicas: 1\n        maxReplicas: 65\n"), field + ".maxReplicas",
              "65 workers cannot share a global batch of 64 (batchSize x minReplicas)");
}

TEST(ApiTrainingJobErrorsTest, WhatElasticJobsCannotDoYetIsRefusedNotIgnored) {
  const std::string field = "spec.replicaSpecs.worker.elasticPolicy";
  const std::string bounds = "        minReplicas: 1\n        maxReplicas: 3\n";
  ExpectError(Elastic(bounds + "        batch: perWorker\n"), field + ".batch",
              "perWorker is not supported yet: use global (the global batch stays and is cut "
              "over each step's workers)");
  std::string async = Elastic(bounds);
  async.replace(async.find("mode: sync"), 10, "mode: async");
  EXPECT_TRUE(ParseTrainingJob(async).ok()) << "async jobs are elastic too";
  std::string own = Elastic(bounds +
                            "      template:\n        spec:\n          containers:\n"
                            "            - name: worker\n              image: me/train:1\n"
                            "              command: [python3, train.py]\n");
  own.replace(own.find("  model: mlp\n"), 13, "");
  const std::string dataset = "  dataset:\n    path: /usr/share/datasets/fashion-mnist\n";
  own.replace(own.find(dataset), dataset.size(), "");
  EXPECT_TRUE(ParseTrainingJob(own).ok()) << "a job's own program is elastic too";
  // Not with servers that only average: a newcomer would have no parameters.
  own.replace(own.find("name: sgd"), 9, "name: none");
  ExpectError(own, "spec.optimizer.name",
              "none cannot be elastic: a worker taken in while the job trains starts from the "
              "servers' parameters, and with none the servers hold only the averaged gradients "
              "(the parameters and optimizer state are each program's): use the servers' "
              "optimizer (sgd, momentum or adam), or leave out elasticPolicy");
}

}  // namespace
}  // namespace kubeps::api
