// What every backend starts for a replica (operator/controller/replica_env.h):
// the agent serves a job's own program, and that program's command and
// environment come from its container with kubeps' own variables on top.
#include "operator/controller/replica_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const ReplicaName kWorker{ReplicaRole::kWorker, 1};
const ReplicaName kServer{ReplicaRole::kServer, 0};

api::TrainingJob Parse(const std::string& yaml) {
  api::ParseResult parsed = api::ParseTrainingJob(yaml);
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return parsed.job.value_or(api::TrainingJob{});
}

api::TrainingJob OwnProgram() {
  return Parse(R"yaml(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: torch}
spec:
  replicaSpecs:
    worker:
      template:
        spec:
          containers:
            - name: trainer
              image: x
              command: [python3, train.py]
              args: ["--out=$(OUT)/$(KUBEPS_NODE_ID)", "$$(OUT)"]
              workingDir: /app
              env:
                - {name: OUT, value: /tmp/out}
                - {name: OMP_NUM_THREADS, value: "3"}
                - {name: KUBEPS_NODE_ID, value: mine}
                - {name: OUT_LOG, value: "$(OUT)/log"}
                - name: SECRET
                  valueFrom: {secretKeyRef: {name: s, key: k}}
)yaml");
}

TEST(ReplicaEnvTest, TheAgentOfAJobsOwnProgramServesIt) {
  EXPECT_THAT(ReplicaArgs(OwnProgram(), kWorker), ElementsAre("--serve"));
  EXPECT_THAT(ReplicaArgs(OwnProgram(), kServer), IsEmpty());
  api::TrainingJob builtin = Parse(R"(apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mnist}
spec: {dataset: {path: /data}}
)");
  EXPECT_THAT(ReplicaArgs(builtin, kWorker), IsEmpty());
  EXPECT_FALSE(UserProcessOf(builtin, kWorker, {}, {}).has_value());
  EXPECT_FALSE(UserProcessOf(OwnProgram(), kServer, {}, {}).has_value());
}

TEST(ReplicaEnvTest, TheProgramsEnvironmentLayersDefaultsContainerAndKubeps) {
  const api::TrainingJob job = OwnProgram();
  auto process = UserProcessOf(job, kWorker, {{"OMP_NUM_THREADS", "1"}, {"SECRET", "default"}},
                               ReplicaEnv(job, kWorker, "127.0.0.1:7000"));
  ASSERT_TRUE(process.has_value());
  EXPECT_EQ(process->container, "trainer");
  EXPECT_EQ(process->working_dir, "/app");
  EXPECT_EQ(process->env.at("OMP_NUM_THREADS"), "3") << "the container overrides a default";
  EXPECT_EQ(process->env.at("KUBEPS_NODE_ID"), "worker-1") << "kubeps' own variables win";
  EXPECT_EQ(process->env.at("KUBEPS_SCHEDULER_ADDR"), "127.0.0.1:7000");
  EXPECT_EQ(process->env.at("OUT_LOG"), "/tmp/out/log") << "a reference to an earlier variable";
  EXPECT_EQ(process->env.count("SECRET"), 0u) << "valueFrom is for Kubernetes alone";
  EXPECT_THAT(process->cluster_only_env, ElementsAre("SECRET"));
  EXPECT_THAT(process->argv,
              ElementsAre("python3", "train.py", "--out=/tmp/out/worker-1", "$(OUT)"));
}

}  // namespace
}  // namespace kubeps::controller
