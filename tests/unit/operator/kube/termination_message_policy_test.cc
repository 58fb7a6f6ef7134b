// The containers' terminationMessagePolicy in the pods the operator builds:
// FallbackToLogsOnError, so that a crash without last words is explained by
// its log's tail, unless the template chose a policy.
#include <gtest/gtest.h>

#include "api/training_job.h"
#include "operator/kube/pod_builder.h"

namespace kubeps::kube {
namespace {

using controller::ReplicaName;
using controller::ReplicaRole;
using nlohmann::json;

api::TrainingJob Job(const std::string& worker_template) {
  auto parsed = api::ParseTrainingJob(R"(
apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mnist, namespace: team-a}
spec:
  replicaSpecs:
    ps: {replicas: 1}
    worker:
      replicas: 1
      template:
)" + worker_template);
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return *parsed.job;
}

json BuildWorker(const api::TrainingJob& job) {
  const ReplicaName name{ReplicaRole::kWorker, 0};
  controller::ReplicaLaunch launch{name, "kubeps-agent", {}, {}, std::nullopt};
  return BuildPod({"mnist", "team-a", "uid-1"}, job, launch, 0, ImageSet{});
}

TEST(TerminationMessagePolicyTest, EveryContainerFallsBackToItsLogOnError) {
  api::TrainingJob job = Job(R"(
        spec:
          initContainers: [{name: fetch, image: busybox, command: [sh, -c, "true"]}]
          containers:
            - {name: trainer, image: registry.example/mlp:1, command: [python3, train.py]}
)");
  json pod = BuildWorker(job);
  int checked = 0;
  for (const char* list : {"initContainers", "containers"}) {
    for (const json& container : pod["spec"][list]) {
      EXPECT_EQ(container.value("terminationMessagePolicy", ""), "FallbackToLogsOnError")
          << container["name"];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3) << "fetch, the agent sidecar and the trainer: " << pod.dump();
}

TEST(TerminationMessagePolicyTest, ATemplatesOwnIsKept) {
  api::TrainingJob job = Job(R"(
        spec:
          containers:
            - name: trainer
              image: registry.example/mlp:1
              command: [python3, train.py]
              terminationMessagePolicy: File
)");
  json pod = BuildWorker(job);
  EXPECT_EQ(pod["spec"]["containers"][0]["terminationMessagePolicy"], "File");
  EXPECT_EQ(pod["spec"]["initContainers"][0]["terminationMessagePolicy"], "FallbackToLogsOnError");
}

}  // namespace
}  // namespace kubeps::kube
