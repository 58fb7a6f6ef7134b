// Good TrainingJob manifests: defaults, every field, the canonical JSON and
// its round trip, and the example manifests shipped in deploy/examples.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/training_job.h"

namespace kubeps::api {
namespace {

void ExpectSameJob(const TrainingJob& a, const TrainingJob& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.namespace_, b.namespace_);
  const TrainingJobSpec& x = a.spec;
  const TrainingJobSpec& y = b.spec;
  EXPECT_EQ(x.mode, y.mode);
  EXPECT_EQ(x.model, y.model);
  EXPECT_EQ(x.dataset_path, y.dataset_path);
  EXPECT_EQ(x.optimizer.name, y.optimizer.name);
  // Exact comparisons on purpose: doubles must survive the round trip bit
  // for bit.
  EXPECT_EQ(x.optimizer.learning_rate, y.optimizer.learning_rate);
  EXPECT_EQ(x.optimizer.momentum, y.optimizer.momentum);
  EXPECT_EQ(x.optimizer.beta1, y.optimizer.beta1);
  EXPECT_EQ(x.optimizer.beta2, y.optimizer.beta2);
  EXPECT_EQ(x.optimizer.epsilon, y.optimizer.epsilon);
  EXPECT_EQ(x.optimizer.weight_decay, y.optimizer.weight_decay);
  EXPECT_EQ(x.batch_size, y.batch_size);
  EXPECT_EQ(x.epochs, y.epochs);
  EXPECT_EQ(x.seed, y.seed);
  EXPECT_EQ(x.big_array_bound, y.big_array_bound);
  EXPECT_EQ(x.resend_timeout_ms, y.resend_timeout_ms);
  EXPECT_EQ(x.max_resends, y.max_resends);
  EXPECT_EQ(x.progress_interval_ms, y.progress_interval_ms);
  EXPECT_EQ(x.gpus_per_worker, y.gpus_per_worker);
  EXPECT_EQ(x.ps.replicas, y.ps.replicas);
  EXPECT_EQ(x.ps.template_override, y.ps.template_override);
  EXPECT_EQ(x.worker.replicas, y.worker.replicas);
  EXPECT_EQ(x.worker.template_override, y.worker.template_override);
  EXPECT_EQ(x.scheduler.replicas, y.scheduler.replicas);
  EXPECT_EQ(x.run_policy.restart_policy, y.run_policy.restart_policy);
  EXPECT_EQ(x.run_policy.backoff_limit, y.run_policy.backoff_limit);
}

TrainingJob MustParse(const std::string& yaml) {
  ParseResult result = ParseTrainingJob(yaml);
  EXPECT_TRUE(result.ok()) << result.ErrorReport("<test>");
  EXPECT_TRUE(result.job.has_value());
  return result.job.value_or(TrainingJob{});
}

const char* kMinimal = R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: tiny
spec:
  dataset:
    path: /data/fmnist
)";

const char* kFull = R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: full-job-7
  namespace: team-a
  labels:
    app: kubeps
    anything: [goes, here]
  annotations:
    note: "ignored"
spec:
  mode: async
  model: cnn
  dataset:
    path: /mnt/data/fashion mnist
  optimizer:
    name: adam
    learningRate: 0.0003
    momentum: 0.5
    beta1: 0.85
    beta2: 0.995
    epsilon: 1.0e-7
    weightDecay: 5e-4
  batchSize: 32
  epochs: 7
  seed: 18446744073709551615
  bigArrayBound: 4096
  resendTimeoutMs: 250
  maxResends: 0
  progressIntervalMs: 100
  gpusPerWorker: 1
  runPolicy:
    restartPolicy: ExitCode
    backoffLimit: 0
  replicaSpecs:
    ps:
      replicas: 3
    worker:
      replicas: 5
      template:
        metadata:
          labels: {role: worker}
        spec:
          nodeSelector:
            accelerator: "true"
          containers:
            - name: worker
              args: ["--verbose", 42, 1.5, true, null, "007", 0.1]
              resources:
                limits:
                  nvidia.com/gpu: 1
                  memory: 4Gi
)";

TEST(ApiTrainingJobTest, DefaultsAreFilled) {
  TrainingJob job = MustParse(kMinimal);
  EXPECT_EQ(job.name, "tiny");
  EXPECT_EQ(job.namespace_, "default");
  const TrainingJobSpec& s = job.spec;
  EXPECT_EQ(s.mode, SyncMode::kSync);
  EXPECT_EQ(s.model, "mlp");
  EXPECT_EQ(s.dataset_path, "/data/fmnist");
  EXPECT_EQ(s.optimizer.name, "sgd");
  EXPECT_EQ(s.optimizer.learning_rate, 0.1);
  EXPECT_EQ(s.optimizer.momentum, 0.9);
  EXPECT_EQ(s.optimizer.beta1, 0.9);
  EXPECT_EQ(s.optimizer.beta2, 0.999);
  EXPECT_EQ(s.optimizer.epsilon, 1e-8);
  EXPECT_EQ(s.optimizer.weight_decay, 0.0);
  EXPECT_EQ(s.batch_size, 64);
  EXPECT_EQ(s.epochs, 1);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.big_array_bound, 1000000);
  EXPECT_EQ(s.resend_timeout_ms, 1000);
  EXPECT_EQ(s.max_resends, 10);
  EXPECT_EQ(s.progress_interval_ms, 2000);
  EXPECT_EQ(s.gpus_per_worker, 0);
  EXPECT_EQ(s.ps.replicas, 2);
  EXPECT_TRUE(s.ps.template_override.is_null());
  EXPECT_EQ(s.worker.replicas, 2);
  EXPECT_TRUE(s.worker.template_override.is_null());
  EXPECT_EQ(s.scheduler.replicas, 1);
  EXPECT_EQ(s.run_policy.restart_policy, RestartPolicy::kOnFailure);
  EXPECT_EQ(s.run_policy.backoff_limit, 3);
}

TEST(ApiTrainingJobTest, NullSectionsMeanDefaults) {
  TrainingJob job = MustParse(std::string(kMinimal) +
                              "  optimizer:\n  runPolicy: null\n  replicaSpecs:\n    ps:\n"
                              "    worker: {replicas: 4, template: ~}\n");
  EXPECT_EQ(job.spec.optimizer.name, "sgd");
  EXPECT_EQ(job.spec.ps.replicas, 2);
  EXPECT_EQ(job.spec.worker.replicas, 4);
  EXPECT_TRUE(job.spec.worker.template_override.is_null());
}

TEST(ApiTrainingJobTest, FullManifestSetsEveryField) {
  TrainingJob job = MustParse(kFull);
  EXPECT_EQ(job.name, "full-job-7");
  EXPECT_EQ(job.namespace_, "team-a");
  const TrainingJobSpec& s = job.spec;
  EXPECT_EQ(s.mode, SyncMode::kAsync);
  EXPECT_EQ(s.model, "cnn");
  EXPECT_EQ(s.dataset_path, "/mnt/data/fashion mnist");
  EXPECT_EQ(s.optimizer.name, "adam");
  EXPECT_EQ(s.optimizer.learning_rate, 0.0003);
  EXPECT_EQ(s.optimizer.momentum, 0.5);
  EXPECT_EQ(s.optimizer.beta1, 0.85);
  EXPECT_EQ(s.optimizer.beta2, 0.995);
  EXPECT_EQ(s.optimizer.epsilon, 1e-7);
  EXPECT_EQ(s.optimizer.weight_decay, 5e-4);
  EXPECT_EQ(s.batch_size, 32);
  EXPECT_EQ(s.epochs, 7);
  EXPECT_EQ(s.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.big_array_bound, 4096);
  EXPECT_EQ(s.resend_timeout_ms, 250);
  EXPECT_EQ(s.max_resends, 0);
  EXPECT_EQ(s.progress_interval_ms, 100);
  EXPECT_EQ(s.gpus_per_worker, 1);
  EXPECT_EQ(s.run_policy.restart_policy, RestartPolicy::kExitCode);
  EXPECT_EQ(s.run_policy.backoff_limit, 0);
  EXPECT_EQ(s.ps.replicas, 3);
  EXPECT_TRUE(s.ps.template_override.is_null());
  EXPECT_EQ(s.worker.replicas, 5);
  EXPECT_EQ(s.scheduler.replicas, 1);

  // The template is kept verbatim, plain scalars typed as YAML does.
  nlohmann::json expected = nlohmann::json::parse(R"({
    "metadata": {"labels": {"role": "worker"}},
    "spec": {
      "nodeSelector": {"accelerator": "true"},
      "containers": [{
        "name": "worker",
        "args": ["--verbose", 42, 1.5, true, null, "007", 0.1],
        "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "4Gi"}}
      }]
    }
  })");
  EXPECT_EQ(s.worker.template_override, expected);
  EXPECT_TRUE(s.worker.template_override["spec"]["nodeSelector"]["accelerator"].is_string());
  EXPECT_TRUE(s.worker.template_override["spec"]["containers"][0]["args"][1].is_number_integer());
}

TEST(ApiTrainingJobTest, JsonInputIsAccepted) {
  TrainingJob job = MustParse(R"({"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "from-json"},
    "spec": {"dataset": {"path": "/d"}, "optimizer": {"learningRate": 1e-08}, "epochs": 2}})");
  EXPECT_EQ(job.name, "from-json");
  EXPECT_EQ(job.spec.optimizer.learning_rate, 1e-8);
  EXPECT_EQ(job.spec.epochs, 2);
}

TEST(ApiTrainingJobTest, ToJsonIsTheCanonicalManifest) {
  TrainingJob job = MustParse(kMinimal);
  nlohmann::json j = ToJson(job);
  nlohmann::json expected = nlohmann::json::parse(R"({
    "apiVersion": "kubeps.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "tiny", "namespace": "default"},
    "spec": {
      "mode": "sync",
      "model": "mlp",
      "nonFinite": "Fail",
      "dataset": {"path": "/data/fmnist"},
      "optimizer": {"name": "sgd", "learningRate": 0.1, "momentum": 0.9, "beta1": 0.9,
                    "beta2": 0.999, "epsilon": 1e-8, "weightDecay": 0.0},
      "batchSize": 64,
      "epochs": 1,
      "seed": 1,
      "bigArrayBound": 1000000,
      "resendTimeoutMs": 1000,
      "maxResends": 10,
      "progressIntervalMs": 2000,
      "gpusPerWorker": 0,
      "backend": "cpu",
      "checkpoint": {"path": "", "intervalSteps": 100, "resume": true},
      "compression": {"type": "none", "threshold": 0.5},
      "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 3, "cleanPodPolicy": "Running",
                    "suspend": false},
      "schedulingPolicy": {"schedulerName": "", "minAvailable": 0, "queue": "", "priorityClass": ""},
      "replicaSpecs": {"ps": {"replicas": 2}, "worker": {"replicas": 2}}
    }
  })");
  EXPECT_EQ(j, expected) << j.dump(2);
}

TEST(ApiTrainingJobTest, ToJsonRoundTrips) {
  for (const char* yaml : {kMinimal, kFull}) {
    TrainingJob job = MustParse(yaml);
    std::string text = ToJson(job).dump();
    TrainingJob again = MustParse(text);
    ExpectSameJob(job, again);
    EXPECT_EQ(ToJson(again), ToJson(job));
    // Indented JSON is YAML too.
    ExpectSameJob(job, MustParse(ToJson(job).dump(2)));
  }
}

TEST(ApiTrainingJobTest, DoublesRoundTripExactly) {
  const std::vector<double> values = {
      0.1,
      1e-8,
      0.30000000000000004,
      1.0 / 3.0,
      2.0 / 3.0 * 1e-5,
      123456789.123456789,
      1.0,
      1e300,
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::min(),
      std::numeric_limits<double>::max(),
      std::nextafter(0.001, 1.0),
      std::nextafter(0.9, 0.0),
  };
  for (double v : values) {
    TrainingJob job = MustParse(kMinimal);
    job.spec.optimizer.learning_rate = v;
    job.spec.optimizer.epsilon = v;
    job.spec.optimizer.weight_decay = v;
    if (v < 1.0) {
      job.spec.optimizer.momentum = v;
      job.spec.optimizer.beta1 = v;
      job.spec.optimizer.beta2 = v;
    }
    std::string text = ToJson(job).dump();
    TrainingJob again = MustParse(text);
    EXPECT_EQ(again.spec.optimizer.learning_rate, v) << text;
    EXPECT_EQ(again.spec.optimizer.epsilon, v) << text;
    EXPECT_EQ(again.spec.optimizer.weight_decay, v) << text;
    EXPECT_EQ(again.spec.optimizer.momentum, job.spec.optimizer.momentum) << text;
    EXPECT_EQ(again.spec.optimizer.beta1, job.spec.optimizer.beta1) << text;
    EXPECT_EQ(again.spec.optimizer.beta2, job.spec.optimizer.beta2) << text;
  }
}

TEST(ApiTrainingJobTest, EnumNames) {
  EXPECT_STREQ(ToString(SyncMode::kSync), "sync");
  EXPECT_STREQ(ToString(SyncMode::kAsync), "async");
  EXPECT_STREQ(ToString(RestartPolicy::kOnFailure), "OnFailure");
  EXPECT_STREQ(ToString(RestartPolicy::kNever), "Never");
  EXPECT_STREQ(ToString(RestartPolicy::kExitCode), "ExitCode");
}

TEST(ApiTrainingJobTest, ServerFieldsAreAccepted) {
  // What the operator gets back from the API server carries more metadata
  // and a status; neither is an error.
  TrainingJob job = MustParse(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: tiny
  uid: 0b1c
  resourceVersion: "42"
  generation: 2
  creationTimestamp: "2024-01-01T00:00:00Z"
spec:
  dataset:
    path: /data/fmnist
status:
  phase: Running
)");
  EXPECT_EQ(job.name, "tiny");
}

std::string Example(const std::string& name) {
  return std::string(KUBEPS_SOURCE_DIR) + "/deploy/examples/" + name;
}

TrainingJob MustParseFile(const std::string& path) {
  ParseResult result = ParseTrainingJobFile(path);
  EXPECT_TRUE(result.ok()) << result.ErrorReport(path);
  return result.job.value_or(TrainingJob{});
}

TEST(ApiTrainingJobTest, ExampleFashionMnist) {
  TrainingJob job = MustParseFile(Example("fashion-mnist.yaml"));
  EXPECT_EQ(job.name, "fashion-mnist");
  EXPECT_EQ(job.spec.model, "mlp");
  EXPECT_EQ(job.spec.mode, SyncMode::kSync);
  EXPECT_EQ(job.spec.dataset_path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(job.spec.optimizer.name, "adam");
  EXPECT_EQ(job.spec.optimizer.learning_rate, 0.001);
  EXPECT_EQ(job.spec.batch_size, 64);
  EXPECT_EQ(job.spec.epochs, 3);
  EXPECT_EQ(job.spec.ps.replicas, 2);
  EXPECT_EQ(job.spec.worker.replicas, 2);
  EXPECT_TRUE(job.spec.worker.template_override.is_null());
}

TEST(ApiTrainingJobTest, ExampleFashionMnistAsync) {
  TrainingJob job = MustParseFile(Example("fashion-mnist-async.yaml"));
  TrainingJob sync = MustParseFile(Example("fashion-mnist.yaml"));
  EXPECT_EQ(job.name, "fashion-mnist-async");
  EXPECT_EQ(job.spec.mode, SyncMode::kAsync);
  // Otherwise the same job as the synchronous one.
  job.name = sync.name;
  job.spec.mode = sync.spec.mode;
  EXPECT_EQ(ToJson(job), ToJson(sync));
}

TEST(ApiTrainingJobTest, ExampleFashionMnistCnn) {
  TrainingJob job = MustParseFile(Example("fashion-mnist-cnn.yaml"));
  EXPECT_EQ(job.name, "fashion-mnist-cnn");
  EXPECT_EQ(job.spec.model, "cnn");
  EXPECT_EQ(job.spec.mode, SyncMode::kSync);
  EXPECT_EQ(job.spec.dataset_path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(job.spec.optimizer.name, "adam");
  EXPECT_EQ(job.spec.optimizer.learning_rate, 0.001);
  EXPECT_EQ(job.spec.batch_size, 64);
  EXPECT_EQ(job.spec.batch_size * job.spec.worker.replicas, 128);
  EXPECT_EQ(job.spec.epochs, 3);
  EXPECT_EQ(job.spec.ps.replicas, 2);
  EXPECT_EQ(job.spec.worker.replicas, 2);
  EXPECT_TRUE(job.spec.worker.template_override.is_object());
  // The full example round-trips like any other job.
  ExpectSameJob(job, MustParse(ToJson(job).dump()));
}

}  // namespace
}  // namespace kubeps::api
